//! The object handles an instance holds: a slab of shared cached objects, bounded per instance.
//!
//! Events lend handles for one `handle` call; queries give handles the guest owns until it
//! drops them. A handle is an index into this slab, which holds an `Arc` of the cached object:
//! nothing is copied until the guest asks for a field.

use std::sync::Arc;

use wasmtime::component::Resource;

use crate::object::KubeObject;
use crate::wasm::bindings::kubewasm::plugin::types::Object;

/// Object handles one instance may own at once, by default.
pub const DEFAULT_MAX_HANDLES: usize = 10_000;

/// The objects behind one instance's handles.
#[derive(Default)]
pub struct Handles {
    slots: Vec<Option<Arc<KubeObject>>>,
    free: Vec<u32>,
    /// Slots lent for the current call, freed when it returns.
    lent: Vec<u32>,
    /// Of those, the slots holding objects that did not come from the cache (an admission
    /// review's): whole, whatever the plugin declared it reads.
    uncached: Vec<u32>,
    /// Handles the guest owns now.
    owned: usize,
}

/// Why handles could not be given.
#[derive(Debug, thiserror::Error)]
#[error(
    "{wanted} more object handles would exceed the limit of {limit} held at once ({held} held); drop some first"
)]
pub struct TooMany {
    /// Handles asked for.
    pub wanted: usize,
    /// Handles the guest owns now.
    pub held: usize,
    /// The most it may own.
    pub limit: usize,
}

impl Handles {
    fn put(&mut self, object: Arc<KubeObject>) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(object);
                slot
            }
            None => {
                self.slots.push(Some(object));
                // At most `limit` owned plus one event's lent handles: far below u32::MAX.
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    /// A borrowed handle to `object`, valid until [`Self::end_call`].
    pub fn lend(&mut self, object: &Arc<KubeObject>) -> Resource<Object> {
        let slot = self.put(object.clone());
        self.lent.push(slot);
        Resource::new_borrow(slot)
    }

    /// A borrowed handle to `object`, which is not from the cache, valid until
    /// [`Self::end_call`].
    pub fn lend_uncached(&mut self, object: &Arc<KubeObject>) -> Resource<Object> {
        let handle = self.lend(object);
        self.uncached.push(handle.rep());
        handle
    }

    /// True when `handle` was lent by [`Self::lend_uncached`].
    pub fn is_uncached(&self, handle: &Resource<Object>) -> bool {
        self.uncached.contains(&handle.rep())
    }

    /// Frees the handles lent for the call that just returned.
    pub fn end_call(&mut self) {
        self.uncached.clear();
        // Popped, not taken: the list keeps its capacity for the next call's lends.
        while let Some(slot) = self.lent.pop() {
            self.release(slot);
        }
    }

    /// Owned handles to `objects`, unless they would take the guest past `limit`.
    pub fn give(
        &mut self,
        objects: Vec<Arc<KubeObject>>,
        limit: usize,
    ) -> Result<Vec<Resource<Object>>, TooMany> {
        self.reserve(objects.len(), limit)?;
        Ok(objects
            .into_iter()
            .map(|o| Resource::new_own(self.put(o)))
            .collect())
    }

    /// An owned handle to `object`, unless it would take the guest past `limit`.
    pub fn give_one(
        &mut self,
        object: Arc<KubeObject>,
        limit: usize,
    ) -> Result<Resource<Object>, TooMany> {
        self.reserve(1, limit)?;
        Ok(Resource::new_own(self.put(object)))
    }

    /// Counts `wanted` more owned handles, unless that would take the guest past `limit`.
    fn reserve(&mut self, wanted: usize, limit: usize) -> Result<(), TooMany> {
        if self.owned + wanted > limit {
            return Err(TooMany {
                wanted,
                held: self.owned,
                limit,
            });
        }
        self.owned += wanted;
        Ok(())
    }

    /// The object behind a handle the guest passed in.
    pub fn get(&self, handle: &Resource<Object>) -> wasmtime::Result<&Arc<KubeObject>> {
        self.slots
            .get(handle.rep() as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| wasmtime::format_err!("unknown object handle {}", handle.rep()))
    }

    /// Returns an owned handle the guest dropped.
    pub fn drop_owned(&mut self, handle: Resource<Object>) -> wasmtime::Result<()> {
        self.get(&handle)?;
        self.owned = self.owned.saturating_sub(1);
        self.release(handle.rep());
        Ok(())
    }

    fn release(&mut self, slot: u32) {
        if let Some(entry) = self.slots.get_mut(slot as usize)
            && entry.take().is_some()
        {
            self.free.push(slot);
        }
    }

    /// Handles the guest owns now.
    pub fn owned(&self) -> usize {
        self.owned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> Arc<KubeObject> {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}
        });
        Arc::new(KubeObject::from_value(json, &Default::default()).expect("pod"))
    }

    #[test]
    fn lent_handles_end_with_the_call_and_slots_are_reused() {
        let mut handles = Handles::default();
        let a = handles.lend(&object("a"));
        assert_eq!(handles.get(&a).expect("lent").name(), "a");
        handles.end_call();
        assert!(handles.get(&a).is_err(), "a lent handle outlived its call");
        let b = handles.give(vec![object("b")], 10).expect("room");
        assert_eq!(b[0].rep(), a.rep(), "the freed slot is reused");
        assert_eq!(handles.owned(), 1);
    }

    #[test]
    fn owned_handles_are_capped_until_dropped() {
        let mut handles = Handles::default();
        let two = handles
            .give(vec![object("a"), object("b")], 3)
            .expect("room for two");
        let refused = handles
            .give(vec![object("c"), object("d")], 3)
            .expect_err("four would exceed three");
        assert_eq!((refused.wanted, refused.held, refused.limit), (2, 2, 3));
        for handle in two {
            handles.drop_owned(handle).expect("owned");
        }
        assert_eq!(handles.owned(), 0);
        handles
            .give(vec![object("c"), object("d")], 3)
            .expect("room again");
    }
}
