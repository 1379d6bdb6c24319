# The outputs of the machinepool role (docs/reference/module-contract.md#outputs).

output "provider_id" {
  description = "The group: example-group:///<namespace>/<pool>."
  value       = "example-group:///${var.captf_object.namespace}/${var.machinepool_name}"
}

output "provider_id_list" {
  description = "One provider ID per member that exists."
  value       = sort([for i, m in kubectl_manifest.member : local.ids[i] if m.uid != ""])
}

output "replicas" {
  description = "Members that exist."
  value       = length([for m in kubectl_manifest.member : m if m.uid != ""])
}

output "instances" {
  description = "Each member with its state."
  value       = [for i, m in kubectl_manifest.member : { provider_id = local.ids[i], state = m.uid != "" ? "running" : "pending" }]
}

output "health" {
  description = "Running once every member exists."
  value = {
    state   = alltrue([for m in kubectl_manifest.member : m.uid != ""]) ? "running" : "pending"
    healthy = alltrue([for m in kubectl_manifest.member : m.uid != ""])
    message = null
    reasons = []
  }
}
