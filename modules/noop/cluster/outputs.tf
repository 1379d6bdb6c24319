output "control_plane_endpoint" {
  description = "The user's endpoint if set, else endpoint_host (default <cluster>.noop.invalid) and endpoint_port; null when endpoint_null is true."
  value = var.endpoint_null ? null : (
    var.control_plane_endpoint != null ? var.control_plane_endpoint : {
      host = coalesce(var.endpoint_host, "${var.captf_cluster.name}.noop.invalid")
      port = var.endpoint_port
    }
  )
}

output "failure_domains" {
  description = "Failure domains of the cluster (the failure_domains knob)."
  value       = var.failure_domains
}

output "exports" {
  description = "Values for machines and pools: backend_id (changes when the load balancer is replaced) merged with extra_exports, and plan_time with the output_drift knob."
  value = merge(
    { backend_id = "noop-backend-${terraform_data.load_balancer.id}" },
    var.extra_exports,
    var.output_drift ? { plan_time = plantimestamp() } : {},
  )
}

output "health" {
  description = "Health of the cluster infrastructure (the health knobs)."
  value       = local.health
}

output "noop_token" {
  description = "The output_token knob; never read by the controller."
  value       = var.output_token
}
