# Test knob: a user variable (spec.variables) whose default adds nothing.

variable "sleep_seconds" {
  description = "When > 0, apply creates a time_sleep that waits this long (the provider sleeps, no command runs), so the engine keeps running for a while; before the load balancer."
  type        = number
  default     = 0
  validation {
    condition     = var.sleep_seconds >= 0
    error_message = "sleep_seconds must be >= 0."
  }
}

variable "output_token" {
  description = "Copied to the extra output time_token only: changing it is an output-only change (the provider still runs in the plan)."
  type        = string
  default     = ""
}
