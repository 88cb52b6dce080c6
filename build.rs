//! Rebuilds when a migration is added or changed: `sqlx::migrate!` embeds the
//! migration folders at compile time, and cargo would not notice a new file.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
