# Slow apply for tests that need a Job whose engine is still running: the provider waits
# create_duration when the sleep is created. Absent (count 0) by default.
resource "time_sleep" "wait" {
  count = var.sleep_seconds > 0 ? 1 : 0

  create_duration = "${var.sleep_seconds}s"
}

# The "backend": the time the provider recorded at create, kept in the state. A new cluster
# name records a new time.
resource "time_static" "created" {
  triggers = {
    cluster = "${var.captf_cluster.namespace}/${var.captf_cluster.name}"
  }
}

# Every input the cluster was created from, stored in the state as the no-op module does.
resource "terraform_data" "load_balancer" {
  input = {
    cluster                   = var.captf_cluster
    object                    = var.captf_object
    tags                      = var.captf_tags
    control_plane_endpoint    = var.control_plane_endpoint
    kubernetes_version        = var.kubernetes_version
    control_plane_initialized = var.control_plane_initialized
    cluster_network           = var.cluster_network
    created_at                = time_static.created.rfc3339
  }

  depends_on = [time_sleep.wait]
}
