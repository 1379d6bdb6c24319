# The pool's "instances": one ConfigMap per member in the object's namespace, as a cloud module
# would size an autoscaling group. Scaling the MachinePool adds or removes members.

locals {
  group  = "example-pool-${var.machinepool_name}"
  labels = { for k, v in var.captf_tags : replace(k, "captf.io/", "captf-") => replace(v, "/", "-") }
  ids    = [for i in range(var.replicas) : "example:///${var.captf_object.namespace}/${var.machinepool_name}/${i}"]
}

resource "kubectl_manifest" "member" {
  count = var.replicas

  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata = {
      name      = "${local.group}-${count.index}"
      namespace = var.captf_object.namespace
      labels    = merge(local.labels, { "captf-example-group" = local.group })
    }
    data = {
      pool             = var.machinepool_name
      member           = tostring(count.index)
      bootstrap_format = var.bootstrap_format
      bootstrap_sha256 = sha256(var.bootstrap_data)
    }
  })
}
