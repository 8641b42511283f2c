-- Argo CD health check of headrace.dev/StreamingSavepoint.
-- Argo CD runs it with the object in the global `obj` and reads the returned table.
-- Written for Lua 5.1 (Argo CD embeds gopher-lua); tests also run it on Lua 5.4.
--   Healthy     phase Succeeded
--   Progressing no status yet, the latest generation not observed yet, phase Pending or InProgress
--   Degraded    phase Failed
local hs = {}

local function result(status, savepoint_status, fallback)
  hs.status = status
  local text = "phase " .. tostring(savepoint_status.phase)
  if savepoint_status.message ~= nil and savepoint_status.message ~= "" then
    text = text .. ": " .. savepoint_status.message
  elseif fallback ~= nil then
    text = text .. ": " .. fallback
  end
  hs.message = text
  return hs
end

local function assess(savepoint)
  local status = savepoint.status
  if status == nil or status.phase == nil then
    hs.status = "Progressing"
    hs.message = "waiting for the operator to take or import the savepoint"
    return hs
  end
  local generation = savepoint.metadata and savepoint.metadata.generation
  local observed = status.observedGeneration
  if generation ~= nil and observed ~= nil and observed < generation then
    hs.status = "Progressing"
    hs.message = "waiting for the operator to observe generation " .. tostring(generation)
    return hs
  end
  if status.phase == "Succeeded" then
    local where = nil
    if status.path ~= nil then
      where = "stored at " .. status.path
      if status.batchId ~= nil then
        where = where .. " (batch " .. tostring(status.batchId) .. ")"
      end
    end
    return result("Healthy", status, where)
  end
  if status.phase == "Failed" then
    return result("Degraded", status, "the savepoint failed")
  end
  return result("Progressing", status, nil)
end

return assess(obj)
