locals {
  # Everything the "instance" was created from; stored in state.
  instance_input = {
    cluster            = var.captf_cluster
    object             = var.captf_object
    machine_name       = var.machine_name
    tags               = var.captf_tags
    backend_id         = try(var.captf_cluster_outputs.backend_id, null)
    user_data          = base64decode(var.bootstrap_data) # proves the base64 round-trip; stays sensitive
    bootstrap_format   = var.bootstrap_format
    failure_domain     = var.failure_domain
    kubernetes_version = var.kubernetes_version
    control_plane      = var.control_plane
  }

  gone = var.gone_after != null && timecmp(plantimestamp(), coalesce(var.gone_after, "2000-01-01T00:00:00Z")) >= 0

  pending = var.pending_until != null && timecmp(plantimestamp(), coalesce(var.pending_until, "2000-01-01T00:00:00Z")) < 0

  health = var.health_state == null ? null : {
    state   = local.pending ? "pending" : var.health_state
    healthy = local.pending ? false : var.healthy
    message = local.pending ? "noop: pending until ${coalesce(var.pending_until, "-")}" : var.health_message
    reasons = local.pending ? ["NoopPending"] : var.health_reasons
  }
}

# Slow apply: runs `sleep N` (no shell) whenever terraform_data.instance is created
# or changed. Absent (count 0) by default, so no command runs.
resource "terraform_data" "sleep" {
  count = var.sleep_seconds > 0 ? 1 : 0

  triggers_replace = [var.sleep_seconds, var.replace_trigger, sha256(jsonencode(local.instance_input))]

  provisioner "local-exec" {
    interpreter = ["sleep"]
    command     = tostring(var.sleep_seconds)
  }
}

# Apply-time failure: replaced on every plan (uuid() is unknown at plan time,
# so is its id, and the postcondition can only be checked during apply).
resource "terraform_data" "fail_apply" {
  count = var.fail_apply ? 1 : 0

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

resource "terraform_data" "instance" {
  input            = local.instance_input
  triggers_replace = var.replace_trigger

  depends_on = [terraform_data.sleep, terraform_data.fail_apply]

  lifecycle {
    precondition {
      condition     = !var.fail_plan
      error_message = "noop: fail_plan is true, so this plan fails on purpose."
    }
  }
}
