# Test knobs: user variables (spec.variables) with safe defaults. With the
# defaults the module runs no command and always reports a healthy pool.

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
  description = "Changing this value replaces terraform_data.group (a destructive change)."
  type        = string
  default     = ""
}

variable "output_token" {
  description = "Copied to the extra output noop_token only: changing it is an output-only change."
  type        = string
  default     = ""
}

variable "fail_plan" {
  description = "When true, plan fails (precondition on terraform_data.group)."
  type        = bool
  default     = false
}

variable "fail_apply" {
  description = "When true, plan succeeds and apply fails (postcondition of terraform_data.fail_apply, replaced on every plan)."
  type        = bool
  default     = false
}

variable "sleep_seconds" {
  description = "When > 0, apply runs `sleep N` (local-exec, no shell) before terraform_data.group whenever it is created or changed."
  type        = number
  default     = 0
  validation {
    condition     = var.sleep_seconds >= 0 && floor(var.sleep_seconds) == var.sleep_seconds
    error_message = "sleep_seconds must be a whole number >= 0."
  }
}

variable "drift" {
  description = "When true, every plan shows an in-place update of terraform_data.drift[0] (persistent drift with unchanged inputs)."
  type        = bool
  default     = false
}

variable "observed_replicas" {
  description = "When not null, the pool reports this many members (replicas, provider_id_list, instances) instead of the replicas input, as if scaled out of band."
  type        = number
  default     = null
  validation {
    condition     = var.observed_replicas == null || (coalesce(var.observed_replicas, 0) >= 0 && floor(coalesce(var.observed_replicas, 0)) == coalesce(var.observed_replicas, 0))
    error_message = "observed_replicas must be null or a whole number >= 0."
  }
}

variable "instance_state" {
  description = "state of every entry of the instances output."
  type        = string
  default     = "running"
}

variable "replace_on_exports" {
  description = "When true, terraform_data.exports[0] is replaced whenever captf_cluster_outputs changes (an exports change becomes destructive, for the pool's exports guard)."
  type        = bool
  default     = false
}
