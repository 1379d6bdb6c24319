# Test knobs: user variables (spec.variables) with safe defaults. With the
# defaults the module runs no command and always reports a healthy cluster.

variable "health_state" {
  description = "health.state to report (pending, running, degraded, stopped, terminated, unknown; any other string tests OutputsInvalid). null makes the health output null."
  type        = string
  default     = "running"
}

variable "healthy" {
  description = "health.healthy to report."
  type        = bool
  default     = true
}

variable "health_message" {
  description = "health.message to report."
  type        = string
  default     = null
}

variable "health_reasons" {
  description = "health.reasons to report."
  type        = list(string)
  default     = []
}

variable "pending_until" {
  description = "RFC 3339 time; until then health is pending (checked against the plan time, so a later refresh or drift run sees running)."
  type        = string
  default     = null
  validation {
    condition     = var.pending_until == null || can(timecmp(var.pending_until, "2000-01-01T00:00:00Z"))
    error_message = "pending_until must be an RFC 3339 timestamp such as 2030-01-01T00:00:00Z."
  }
}

variable "replace_trigger" {
  description = "Changing this value replaces terraform_data.load_balancer (a destructive change; exports.backend_id changes too)."
  type        = string
  default     = ""
}

variable "protected_trigger" {
  description = "When set, adds terraform_data.protected[0] with prevent_destroy, replaced when this value changes: any change (or null again) plans a destroy the engine refuses."
  type        = string
  default     = null
}

variable "output_drift" {
  description = "When true, exports.plan_time is plantimestamp() (whole seconds): every apply's plan shows an output-only change; a drift check's plan shows it only when it starts in a later second than the check's refresh-only apply, which writes the new value."
  type        = bool
  default     = false
}

variable "output_token" {
  description = "Copied to the extra output noop_token only: changing it is an output-only change."
  type        = string
  default     = ""
}

variable "fail_plan" {
  description = "When true, plan fails (precondition on terraform_data.load_balancer)."
  type        = bool
  default     = false
}

variable "fail_apply" {
  description = "When true, plan succeeds and apply fails (postcondition of terraform_data.fail_apply, replaced on every plan)."
  type        = bool
  default     = false
}

variable "sleep_seconds" {
  description = "When > 0, apply runs `sleep N` (local-exec, no shell) before the main resource whenever it is created or changed."
  type        = number
  default     = 0
  validation {
    condition     = var.sleep_seconds >= 0 && floor(var.sleep_seconds) == var.sleep_seconds
    error_message = "sleep_seconds must be a whole number >= 0."
  }
}

variable "destroy_sleep_seconds" {
  description = "When > 0, adds terraform_data.destroy_sleep[0], whose destroy runs `sleep N` (local-exec, no shell): a destroy that takes N seconds."
  type        = number
  default     = 0
  validation {
    condition     = var.destroy_sleep_seconds >= 0 && floor(var.destroy_sleep_seconds) == var.destroy_sleep_seconds
    error_message = "destroy_sleep_seconds must be a whole number >= 0."
  }
}

variable "drift" {
  description = "When true, every plan shows an in-place update of terraform_data.drift[0] (persistent drift with unchanged inputs)."
  type        = bool
  default     = false
}

variable "endpoint_host" {
  description = "Host of the generated endpoint when control_plane_endpoint is null; null means <cluster>.noop.invalid."
  type        = string
  default     = null
}

variable "endpoint_port" {
  description = "Port of the generated endpoint when control_plane_endpoint is null."
  type        = number
  default     = 6443
}

variable "endpoint_null" {
  description = "When true, the control_plane_endpoint output is null."
  type        = bool
  default     = false
}

variable "failure_domains" {
  description = "Value of the failure_domains output (null or [] clear status.failureDomains)."
  type = list(object({
    name          = string
    control_plane = optional(bool, true)
    attributes    = optional(map(string), {})
  }))
  default = [{ name = "fd1", control_plane = true }]
}

variable "extra_exports" {
  description = "Merged into the exports output next to backend_id (an output-only change of a contract output)."
  type        = any
  default     = {}
}

variable "state_padding" {
  description = "Adds terraform_data.padding[0] holding this many 128 KiB strings of hex digests (stored twice, as input and output): about 0.14 MiB of compressed state each, so 8 or more make Terraform split the state into 1 MiB chunks. 0 adds nothing."
  type        = number
  default     = 0
  validation {
    condition     = var.state_padding >= 0 && var.state_padding <= 256 && floor(var.state_padding) == var.state_padding
    error_message = "state_padding must be a whole number from 0 to 256."
  }
}
