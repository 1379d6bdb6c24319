output "provider_id" {
  description = "Group id noop-group:///<namespace>/<machinepool_name>."
  value       = "noop-group:///${var.captf_object.namespace}/${var.machinepool_name}"
}

output "provider_id_list" {
  description = "One noop:///<namespace>/<machinepool_name>/<i> per member, sorted."
  value       = sort(local.raw_ids)
}

output "replicas" {
  description = "Observed member count (the replicas input, or observed_replicas)."
  value       = local.members
}

output "instances" {
  description = "One entry per member: provider_id and state (the instance_state knob)."
  value       = [for id in sort(local.raw_ids) : { provider_id = id, state = var.instance_state }]
}

output "health" {
  description = "Health of the pool (the health knobs)."
  value       = local.health
}

output "noop_token" {
  description = "The output_token knob; never read by the controller."
  value       = var.output_token
}
