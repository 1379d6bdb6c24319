# The outputs of the machine role (docs/reference/module-contract.md#outputs).

output "provider_id" {
  description = "example:///<namespace>/<machine>, the Node's spec.providerID a cloud provider would set."
  value       = "example:///${var.captf_object.namespace}/${var.machine_name}"
}

output "addresses" {
  description = "The instance's address."
  value       = [{ type = "InternalDNS", address = "${local.name}.${var.captf_object.namespace}.svc" }]
}

output "failure_domain" {
  description = "Where CAPI placed the machine."
  value       = var.failure_domain
}

output "interruptible" {
  description = "Not a spot instance."
  value       = false
}

output "health" {
  description = "Running once the instance exists."
  value = {
    state   = kubectl_manifest.instance.uid != "" ? "running" : "pending"
    healthy = kubectl_manifest.instance.uid != ""
    message = null
    reasons = []
  }
}
