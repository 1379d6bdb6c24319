//! The engines the no-op module images are built with.

/// The no-op module images of one engine: OpenTofu (tag `e2e`) or Terraform
/// (`e2e-terraform`).
#[derive(Clone, Copy, Debug)]
pub struct Engine {
    pub tag: &'static str,
}

/// The OpenTofu no-op images.
pub const OPENTOFU: Engine = Engine { tag: "e2e" };
/// The Terraform no-op images.
pub const TERRAFORM: Engine = Engine {
    tag: "e2e-terraform",
};

impl Engine {
    /// The image of the no-op module of `role` (`cluster`, `machine`, `machinepool`).
    pub fn image(self, role: &str) -> String {
        format!("captf.local/modules/noop-{role}:{}", self.tag)
    }
}
