# The outputs of modules/noop/cluster with its default knobs; the exports carry the time the
# provider recorded.

output "control_plane_endpoint" {
  description = "The user's endpoint if set, else <cluster>.time.invalid:6443."
  value = var.control_plane_endpoint != null ? var.control_plane_endpoint : {
    host = "${var.captf_cluster.name}.time.invalid"
    port = 6443
  }
}

output "failure_domains" {
  description = "One failure domain for the control plane."
  value       = [{ name = "fd1", control_plane = true, attributes = {} }]
}

output "exports" {
  description = "Values for machines and pools: backend_id (time-backend-<load balancer id>) and created_at (RFC 3339 time of the provider's time_static, UTC)."
  value = {
    backend_id = "time-backend-${terraform_data.load_balancer.id}"
    created_at = time_static.created.rfc3339
  }
}

output "health" {
  description = "Always a healthy, running cluster."
  value = {
    state   = "running"
    healthy = true
    message = null
    reasons = []
  }
}

output "time_token" {
  description = "The output_token knob; never read by the controller."
  value       = var.output_token
}
