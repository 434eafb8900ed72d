//! What a sync round computes: the algorithm's timing and rule
//! ([`Algorithm`]), the rules ([`SyncRule`], registered by name
//! in [`Rules`]: model averaging, EASGD's elastic step, BMUF's block
//! momentum, or one's own), their math as plain functions, and the combined
//! vector a round writes back from, block by block.

mod algorithm;
mod combined;
mod math;
mod rule;
mod settings;

pub use crate::hogwild::WriteBack;
pub use algorithm::{Algorithm, Rule};
pub use combined::Combined;
pub(crate) use combined::{SharedSlice, TARGET_BLOCK};
pub use math::{elastic, mean_into, BmufParams, DilocoParams, OuterState, OuterStep};
pub(crate) use math::{elastic_into, elastic_pull, resident_zeros};
pub use rule::{
    BlockMomentum, Diloco, Elastic, Exchange, ModelAveraging, Outer, RuleContext, RuleFactory,
    RuleState, Rules, SyncRule,
};
pub(crate) use settings::{bad, validate_diloco, DAY_MS};
pub use settings::{BmufSettings, EasgdSettings, ShadowSettings, ShadowThreads};
