output "provider_id" {
  description = "noop:///<namespace>/<machine_name>, or provider_id_override; empty once gone_after has passed."
  value       = local.gone ? "" : var.provider_id_override != null ? var.provider_id_override : "noop:///${var.captf_object.namespace}/${var.machine_name}"
}

output "addresses" {
  description = "The addresses knob (default one InternalIP 10.0.0.1)."
  value       = var.addresses
}

output "failure_domain" {
  description = "The failure_domain input (null when unset), or failure_domain_override."
  value       = var.failure_domain_override != null ? var.failure_domain_override : var.failure_domain
}

output "interruptible" {
  description = "The interruptible knob (default false)."
  value       = var.interruptible
}

output "health" {
  description = "Health of the machine (the health knobs)."
  value       = local.health
}

output "noop_token" {
  description = "The output_token knob; never read by the controller."
  value       = var.output_token
}
