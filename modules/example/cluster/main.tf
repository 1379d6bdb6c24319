# The cluster's "load balancer": a ConfigMap in the object's namespace, as a cloud module would
# create a load balancer. The provider reads it back on every plan, so an edit made outside
# CAPTF is drift: the drift check reports it and `spec.drift.action: Remediate` puts it back.

variable "port" {
  description = "The API server port the load balancer serves (a user variable: spec.variables.port)."
  type        = number
  default     = 6443
  validation {
    condition     = var.port > 0 && var.port < 65536
    error_message = "port must be a TCP port (1-65535)."
  }
}

locals {
  name = "example-lb-${var.captf_cluster.name}"
  # Tags become labels; a label value cannot hold "/", so the keys lose their prefix.
  labels = { for k, v in var.captf_tags : replace(k, "captf.io/", "captf-") => replace(v, "/", "-") }
}

resource "kubectl_manifest" "load_balancer" {
  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata = {
      name      = local.name
      namespace = var.captf_object.namespace
      labels    = local.labels
    }
    data = {
      cluster            = var.captf_cluster.name
      port               = tostring(var.port)
      kubernetes_version = coalesce(var.kubernetes_version, "unset")
    }
  })
}
