locals {
  # Everything the "group" was created from; stored in state.
  group_input = {
    cluster                 = var.captf_cluster
    object                  = var.captf_object
    machinepool_name        = var.machinepool_name
    tags                    = var.captf_tags
    backend_id              = try(var.captf_cluster_outputs.backend_id, null)
    replicas                = var.replicas
    user_data               = base64decode(var.bootstrap_data) # proves the base64 round-trip; stays sensitive
    bootstrap_format        = var.bootstrap_format
    failure_domains         = var.failure_domains
    cluster_failure_domains = var.cluster_failure_domains
    kubernetes_version      = var.kubernetes_version
    node_labels             = var.node_labels
  }

  members = var.observed_replicas != null ? var.observed_replicas : var.replicas
  raw_ids = [for i in range(local.members) : "noop:///${var.captf_object.namespace}/${var.machinepool_name}/${i}"]

  pending = var.pending_until != null && timecmp(plantimestamp(), coalesce(var.pending_until, "2000-01-01T00:00:00Z")) < 0

  health = var.health_state == null ? null : {
    state   = local.pending ? "pending" : var.health_state
    healthy = local.pending ? false : var.healthy
    message = local.pending ? "noop: pending until ${coalesce(var.pending_until, "-")}" : var.health_message
    reasons = local.pending ? ["NoopPending"] : var.health_reasons
  }
}

# Slow apply: runs `sleep N` (no shell) whenever terraform_data.group is created
# or changed. Absent (count 0) by default, so no command runs.
resource "terraform_data" "sleep" {
  count = var.sleep_seconds > 0 ? 1 : 0

  triggers_replace = [var.sleep_seconds, var.replace_trigger, sha256(jsonencode(local.group_input))]

  provisioner "local-exec" {
    interpreter = ["sleep"]
    command     = tostring(var.sleep_seconds)
  }
}

# Apply-time failure: replaced on every plan (uuid() is unknown at plan time,
# so is its id, and the postcondition can only be checked during apply).
# Also when the cluster's exports carry fail_pool_apply = true: an exports
# change whose apply fails (the pool's partly applied exports change).
resource "terraform_data" "fail_apply" {
  count = var.fail_apply || try(var.captf_cluster_outputs.fail_pool_apply, false) == true ? 1 : 0

  triggers_replace = uuid()

  lifecycle {
    postcondition {
      condition     = self.id == ""
      error_message = "noop: fail_apply is true, so this apply fails on purpose."
    }
  }
}

# Persistent drift: the input is unknown (uuid()) on every plan, so every plan
# shows an in-place update.
resource "terraform_data" "drift" {
  count = var.drift ? 1 : 0

  input = uuid()
}

# Bound to the cluster's exports: with replace_on_exports, an exports change
# replaces it (delete then create), which the pool's exports guard blocks.
resource "terraform_data" "exports" {
  count = var.replace_on_exports ? 1 : 0

  triggers_replace = sha256(jsonencode(var.captf_cluster_outputs))
}

resource "terraform_data" "group" {
  input            = local.group_input
  triggers_replace = var.replace_trigger

  depends_on = [terraform_data.sleep, terraform_data.fail_apply]

  lifecycle {
    precondition {
      condition     = !var.fail_plan
      error_message = "noop: fail_plan is true, so this plan fails on purpose."
    }
  }
}
