# The outputs of the cluster role (docs/reference/module-contract.md#outputs).

output "control_plane_endpoint" {
  description = "The user's endpoint if set, else the load balancer's name in the namespace."
  value = var.control_plane_endpoint != null ? var.control_plane_endpoint : {
    host = "${local.name}.${var.captf_object.namespace}.svc"
    port = var.port
  }
}

output "failure_domains" {
  description = "One failure domain that takes control-plane machines."
  value       = [{ name = "zone-a", control_plane = true, attributes = {} }]
}

output "exports" {
  description = "What machines and pools receive as captf_cluster_outputs: strings and integers only."
  value = {
    load_balancer = local.name
    namespace     = var.captf_object.namespace
  }
}

output "health" {
  description = "Running once the load balancer exists."
  value = {
    state   = kubectl_manifest.load_balancer.uid != "" ? "running" : "pending"
    healthy = kubectl_manifest.load_balancer.uid != ""
    message = null
    reasons = []
  }
}
