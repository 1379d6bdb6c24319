//! Consuming an approval (or a restore request) once it has been used; what approvals name
//! and say is [`crate::decide::approvals`].

use kube::api::{Api, Patch, PatchParams};

use crate::error::{Error, Result};

/// Removes `annotation` from the object if it still holds `value`: a JSON patch with a `test`,
/// so an approval written meanwhile (a newer value) survives. `false` when it did not hold
/// `value` any more.
pub async fn consume<K>(api: &Api<K>, name: &str, annotation: &str, value: &str) -> Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let path = format!(
        "/metadata/annotations/{}",
        annotation.replace('~', "~0").replace('/', "~1")
    );
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": path, "value": value},
        {"op": "remove", "path": path},
    ]))?;
    match api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(true),
        // 422: the test failed (another value, or none); 404: the object is gone.
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 404 => Ok(false),
        Err(e) => Err(Error::Kube {
            action: format!("removing the {annotation} approval"),
            source: e,
        }),
    }
}
