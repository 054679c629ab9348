//! What several fuzz targets share.

use std::sync::OnceLock;

use vestibule::keys::KeyRing;

/// The fuzz key ring: `key1` (active) and `key2`. The seeds in `fuzz/seeds/` are signed with it.
pub fn ring() -> &'static KeyRing {
    static RING: OnceLock<KeyRing> = OnceLock::new();
    RING.get_or_init(|| {
        KeyRing::from_entries(
            "key1",
            &[
                ("key1", "ZnV6ei1rZXktb25lLWZ1enota2V5LW9uZS1mdXp6LWtleS1vbmUtMDAwMDA="),
                ("key2", "ZnV6ei1rZXktdHdvLWZ1enota2V5LXR3by1mdXp6LWtleS10d28tMDAwMDA="),
            ],
        )
        .expect("fuzz ring")
    })
}
