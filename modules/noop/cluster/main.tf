locals {
  # Everything the "load balancer" was created from; stored in state.
  load_balancer_input = {
    cluster                   = var.captf_cluster
    object                    = var.captf_object
    tags                      = var.captf_tags
    control_plane_endpoint    = var.control_plane_endpoint
    kubernetes_version        = var.kubernetes_version
    control_plane_initialized = var.control_plane_initialized
    cluster_network           = var.cluster_network
  }

  pending = var.pending_until != null && timecmp(plantimestamp(), coalesce(var.pending_until, "2000-01-01T00:00:00Z")) < 0

  health = var.health_state == null ? null : {
    state   = local.pending ? "pending" : var.health_state
    healthy = local.pending ? false : var.healthy
    message = local.pending ? "noop: pending until ${coalesce(var.pending_until, "-")}" : var.health_message
    reasons = local.pending ? ["NoopPending"] : var.health_reasons
  }
}

# Slow apply: runs `sleep N` (no shell) whenever the load balancer is created
# or changed. Absent (count 0) by default, so no command runs.
resource "terraform_data" "sleep" {
  count = var.sleep_seconds > 0 ? 1 : 0

  triggers_replace = [var.sleep_seconds, var.replace_trigger, sha256(jsonencode(local.load_balancer_input))]

  provisioner "local-exec" {
    interpreter = ["sleep"]
    command     = tostring(var.sleep_seconds)
  }
}

# Slow destroy: a destroy-time provisioner may only read its own resource, so the
# duration is its input.
resource "terraform_data" "destroy_sleep" {
  count = var.destroy_sleep_seconds > 0 ? 1 : 0

  input = var.destroy_sleep_seconds

  provisioner "local-exec" {
    when        = destroy
    interpreter = ["sleep"]
    command     = tostring(self.input)
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

# Infrastructure that must never go: once created, replacing or removing it fails
# the plan, approved or not.
resource "terraform_data" "protected" {
  count = var.protected_trigger == null ? 0 : 1

  triggers_replace = var.protected_trigger

  lifecycle {
    prevent_destroy = true
  }
}

# A large state: hex digests do not compress below half their size, so each block
# adds about 0.14 MiB of gzip (the value is kept twice, as input and output).
# range() is capped at 1024 elements, hence blocks of 1024 digests.
resource "terraform_data" "padding" {
  count = var.state_padding > 0 ? 1 : 0

  input = [for i in range(var.state_padding) : join("", [for j in range(1024) : sha512("${i}/${j}")])]
}

resource "terraform_data" "load_balancer" {
  input            = local.load_balancer_input
  triggers_replace = var.replace_trigger

  depends_on = [terraform_data.sleep, terraform_data.fail_apply]

  lifecycle {
    precondition {
      condition     = !var.fail_plan
      error_message = "noop: fail_plan is true, so this plan fails on purpose."
    }
  }
}
