-- Argo CD health check of headrace.dev/StreamingApp.
-- Argo CD runs it with the object in the global `obj` and reads the returned table.
-- Written for Lua 5.1 (Argo CD embeds gopher-lua); tests also run it on Lua 5.4.
--   Healthy     phase Running with Ready True, or phase Completed
--   Progressing the operator has not observed the latest generation yet, or phase Deploying,
--               Upgrading, Restarting, Savepointing, Rescaling (or Running while not Ready yet)
--   Degraded    phase Failed or RolledBack, or Degraded True with a reason saying the desired spec is
--               not applied: InvalidSpec, UpgradeRefused, UpgradeNotRetried, RestoreSourceMissing,
--               or that restarts exceeded their budget and slowed down: RestartsExhausted
--   Suspended   phase Suspended
local hs = {}

local PROGRESSING_PHASES = {
  Deploying = true, Upgrading = true, Restarting = true, Savepointing = true, Rescaling = true,
}
local REFUSED_SPEC_REASONS = {
  InvalidSpec = true, UpgradeRefused = true, UpgradeNotRetried = true, RestoreSourceMissing = true,
  RestartsExhausted = true,
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
  if degraded ~= nil and degraded.status == "True" and REFUSED_SPEC_REASONS[degraded.reason] then
    return result("Degraded", phase, degraded)
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
