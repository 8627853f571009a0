-- Argo CD health check for kaiwu.inspur.com/KaiwuCluster, read from the kstatus conditions the
-- reconciler writes (docs/metrics.md, "Status"). Install it into argocd-cm as
-- resource.customizations.health.kaiwu.inspur.com_KaiwuCluster (deploy/argocd/argocd-cm-patch.yaml).
--   paused (spec.paused, or the annotation kaiwu.inspur.com/paused: "true")  -> Suspended
--   no status yet, or a generation the reconciler has not observed          -> Progressing
--   Stalled=True                                                             -> Degraded
--   Reconciling=True                                                         -> Progressing
--   Ready=True                                                               -> Healthy
--   Ready=False (nothing in progress, e.g. a KaiwuDB node lost)              -> Degraded
local hs = {}

local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function said(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local annotations = {}
if obj.metadata ~= nil and obj.metadata.annotations ~= nil then
  annotations = obj.metadata.annotations
end
if (obj.spec ~= nil and obj.spec.paused == true) or annotations["kaiwu.inspur.com/paused"] == "true" then
  hs.status = "Suspended"
  hs.message = "Paused: the reconciler takes no action on this cluster"
  return hs
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the reconciler to report status"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the reconciler to apply generation " .. tostring(generation)
  return hs
end

local stalled = condition(status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "Stalled")
  return hs
end
local reconciling = condition(status, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = said(reconciling, "Reconciling")
  return hs
end
local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready, "Ready")
  return hs
end
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = said(ready, "Not ready")
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the Ready condition"
return hs
