# The machine's "instance": a ConfigMap in the object's namespace, as a cloud module would
# create a virtual machine from the bootstrap data. It keeps a digest of the bootstrap data,
# never the data (it holds join tokens). The provider reads it back on every plan, so an edit
# made outside CAPTF is drift.

locals {
  name   = "example-machine-${var.machine_name}"
  labels = { for k, v in var.captf_tags : replace(k, "captf.io/", "captf-") => replace(v, "/", "-") }
}

resource "kubectl_manifest" "instance" {
  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata = {
      name      = local.name
      namespace = var.captf_object.namespace
      labels    = local.labels
    }
    data = {
      machine          = var.machine_name
      load_balancer    = try(var.captf_cluster_outputs.load_balancer, "")
      control_plane    = tostring(var.control_plane)
      bootstrap_format = var.bootstrap_format
      bootstrap_sha256 = sha256(var.bootstrap_data)
    }
  })
}
