//! The manifest's controller (0.5), checked: the reconciled, owned and watched types, and how
//! a watched type names the keys it wakes.

use crate::controller::{Spec, Wake, Watched};
use crate::gvk::Gvk;
use crate::informer::index::is_builtin;
use crate::plugins::manifest::{
    DeclaredIndex, MAX_TYPES, ManifestError, check_count, check_gvk, check_name, error,
};
use crate::wasm::bindings::kubewasm::plugin::types as wit;

/// The checked controller; `indexes` are the manifest's own, which `watches` may name.
pub fn controller(c: &wit::Controller, indexes: &[DeclaredIndex]) -> Result<Spec, ManifestError> {
    check_count("controller.owns", c.owns.len(), MAX_TYPES)?;
    check_count("controller.watches", c.watches.len(), MAX_TYPES)?;
    let reconciles = check_gvk("controller.reconciles".into(), &c.reconciles)?;
    let mut owns: Vec<Gvk> = Vec::new();
    for (i, g) in c.owns.iter().enumerate() {
        let gvk = check_gvk(format!("controller.owns[{i}]"), g)?;
        if gvk == reconciles {
            return Err(error(
                format!("controller.owns[{i}]"),
                format!("{gvk} is the reconciled type: an object cannot own its own kind here"),
            ));
        }
        if !owns.contains(&gvk) {
            owns.push(gvk);
        }
    }
    let mut watches = Vec::new();
    for (i, w) in c.watches.iter().enumerate() {
        let field = format!("controller.watches[{i}]");
        let gvk = check_gvk(format!("{field}.gvk"), &w.gvk)?;
        let wakes = match &w.wakes {
            wit::WakeMap::Label(label) => {
                check_name(format!("{field}.wakes.label"), label)?;
                if label.is_empty() {
                    return Err(error(format!("{field}.wakes.label"), "is empty"));
                }
                Wake::Label(label.clone())
            }
            wit::WakeMap::Index(name) => {
                check_name(format!("{field}.wakes.index"), name)?;
                if is_builtin(name) {
                    return Err(error(
                        format!("{field}.wakes.index"),
                        format!(
                            "{name:?} is a built-in index, whose values are not object keys: declare an index whose values are `namespace/name`"
                        ),
                    ));
                }
                let func = indexes
                    .iter()
                    .find(|x| x.gvk == gvk && x.name == *name)
                    .map(|x| x.func.clone())
                    .ok_or_else(|| {
                        error(
                            format!("{field}.wakes.index"),
                            format!("{name:?} is not one of the manifest's indexes on {gvk}"),
                        )
                    })?;
                Wake::Index(func)
            }
        };
        watches.push(Watched { gvk, wakes });
    }
    Ok(Spec {
        reconciles,
        owns,
        watches,
        finalizer: c.finalizer,
    })
}
