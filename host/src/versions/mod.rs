//! Versions of the door: the live one and the one before it, the card each
//! answered and the answers it declared reusable, and the operator's
//! control surface that swaps them.

pub mod card;
pub mod control;
pub mod reuse;
pub mod swap;
