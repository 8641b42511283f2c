-- Argo CD health check of headrace.dev/StreamingApp.
-- Argo CD runs it with the object in the global `obj` and reads the returned table.
-- Written for Lua 5.1 as Argo CD runs it (gopher-lua without the standard libraries: base, table and an `os`
-- with only time and date, no string library); tests run it so on Lua 5.1 and 5.4.
--   Healthy     phase Running with Ready True, or phase Completed
--   Progressing the operator has not observed the latest generation yet, or phase Deploying,
--               Upgrading, Restarting, Savepointing, Rescaling (or Running while not Ready yet)
--   Degraded    phase Failed or RolledBack, or Degraded True with a reason saying the desired spec is
--               not applied: InvalidSpec, UpgradeRefused, UpgradeNotRetried, RestoreSourceMissing,
--               that restarts exceeded their budget and slowed down: RestartsExhausted, or that the app
--               keeps failing before its first committed batch: StartupFailing;
--               or Degraded True (any reason) for longer than DEGRADED_GRACE_SECONDS (not once
--               Suspended or Completed)
--   Suspended   phase Suspended
local hs = {}

-- The chart sets it from argocd.healthChecks.degradedGraceSeconds.
local DEGRADED_GRACE_SECONDS = 600

local PROGRESSING_PHASES = {
  Deploying = true, Upgrading = true, Restarting = true, Savepointing = true, Rescaling = true,
}
local DEGRADED_REASONS = {
  InvalidSpec = true, UpgradeRefused = true, UpgradeNotRetried = true, RestoreSourceMissing = true,
  RestartsExhausted = true, StartupFailing = true,
}

local function find_condition(status, condition_type)
  if status.conditions == nil then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if condition.type == condition_type then
      return condition
    end
  end
  return nil
end

local STAMP = "%Y-%m-%dT%H:%M:%SZ"

-- A time (seconds since the epoch) as Kubernetes writes one ("2026-11-21T12:00:00Z"). Argo CD's os.date
-- formats an explicit time in the controller's local zone even after "!": then the local offset is
-- taken off first.
local function utc_stamp(epoch)
  if os.date("!%H:%M", 0) == "00:00" then
    return os.date("!" .. STAMP, epoch)
  end
  local offset = os.time() - os.time(os.date("!*t"))
  return os.date(STAMP, epoch - offset)
end

-- Whether a condition changed status more than `seconds` ago. Without a string library the time is not
-- parsed: stamps of one fixed UTC format compare in time order as strings.
local function older_than(condition, seconds)
  local stamp = condition.lastTransitionTime
  if type(stamp) ~= "string" or os == nil or os.time == nil or os.date == nil then
    return false
  end
  return stamp < utc_stamp(os.time() - seconds)
end

local function describe(condition)
  if condition == nil then
    return ""
  end
  local text = condition.type .. " " .. tostring(condition.status)
  if condition.reason ~= nil and condition.reason ~= "" then
    text = text .. " (" .. condition.reason .. ")"
  end
  if condition.message ~= nil and condition.message ~= "" then
    text = text .. ": " .. condition.message
  end
  return text
end

local function result(status, phase, condition)
  hs.status = status
  local details = describe(condition)
  if details == "" then
    hs.message = "phase " .. tostring(phase)
  else
    hs.message = "phase " .. tostring(phase) .. "; " .. details
  end
  return hs
end

local function assess(app)
  local status = app.status
  if status == nil then
    hs.status = "Progressing"
    hs.message = "waiting for the operator to report a status"
    return hs
  end
  local generation = app.metadata and app.metadata.generation
  local observed = status.observedGeneration
  if generation ~= nil and (observed == nil or observed < generation) then
    hs.status = "Progressing"
    hs.message = "waiting for the operator to observe generation " .. tostring(generation)
    return hs
  end
  local phase = status.phase
  local ready = find_condition(status, "Ready")
  local degraded = find_condition(status, "Degraded")
  local progressing = find_condition(status, "Progressing")
  if phase == "Failed" or phase == "RolledBack" then
    return result("Degraded", phase, degraded or ready)
  end
  if degraded ~= nil and degraded.status == "True" then
    if DEGRADED_REASONS[degraded.reason] then
      return result("Degraded", phase, degraded)
    end
    local settled = phase == "Suspended" or phase == "Completed"
    if not settled and older_than(degraded, DEGRADED_GRACE_SECONDS) then
      hs.status = "Degraded"
      hs.message = "phase " .. tostring(phase) .. "; Degraded for more than " .. DEGRADED_GRACE_SECONDS
        .. "s since " .. degraded.lastTransitionTime .. ": " .. describe(degraded)
      return hs
    end
  end
  if phase == "Suspended" then
    return result("Suspended", phase, ready)
  end
  if phase == "Completed" then
    return result("Healthy", phase, ready)
  end
  if phase == "Running" and ready ~= nil and ready.status == "True" then
    return result("Healthy", phase, ready)
  end
  if phase ~= nil and PROGRESSING_PHASES[phase] then
    return result("Progressing", phase, progressing or ready)
  end
  return result("Progressing", phase, ready or progressing)
end

return assess(obj)
