-- Argo CD health check for rl.agentruntime.io/RolloutBatch and RolloutPool (Lua 5.1, as Argo CD
-- runs it). A pool: Reconciling=True while it fills (Progressing), Ready=True when full (Healthy),
-- Stalled=True when its pods cannot run (Degraded, with the reason's message).
--
-- A RolloutBatch is one bounded experiment. The operator publishes kstatus-style conditions:
-- while running Reconciling=True/Ready=False; on success Ready=True; on failure or an invalid
-- spec Stalled=True. Mapping:
--   status.observedGeneration behind metadata.generation -> Progressing (status is stale)
--   Stalled=True                                          -> Degraded (the condition's message)
--   Ready=True                                            -> Healthy (the condition's message)
--   anything else                                         -> Progressing
local hs = {}

local function condition(status, condType)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == condType then
      return c
    end
  end
  return nil
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return c.type
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator"
  return hs
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition(status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

hs.status = "Progressing"
local reconciling = condition(status, "Reconciling")
if status.message ~= nil and status.message ~= "" then
  hs.message = status.message
elseif reconciling ~= nil and reconciling.message ~= nil and reconciling.message ~= "" then
  hs.message = reconciling.message
else
  hs.message = "Waiting for the operator"
end
return hs
