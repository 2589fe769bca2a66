//! What the benchmarks share: a policy with a fixed delay and limit, and
//! tower-acc's limiter to compare with.
#![allow(dead_code)]

use std::time::Duration;

use tower_autothrottle::policy::{MakePolicy, Policy, Sample, Throttle};
use tower_autothrottle::{ConfigError, SlotKey};

/// A fixed delay and limit, so that a figure is the layer's, not a
/// policy's. `Fixed::unbound()` never holds a request back.
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    pub delay: Duration,
    pub limit: usize,
}

impl Fixed {
    pub fn unbound() -> Self {
        Fixed {
            delay: Duration::ZERO,
            limit: 1 << 20,
        }
    }
}

impl Policy for Fixed {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.delay.as_secs_f64(), self.limit)
    }
    fn on_sample(&mut self, _: &Sample) -> Throttle {
        self.throttle()
    }
}

impl MakePolicy for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
    fn make_policy(&self, _: &SlotKey) -> Box<dyn Policy> {
        Box::new(*self)
    }
}

/// tower-acc's AIMD limiter, with a limit that never binds.
pub fn tower_acc_layer() -> tower_acc::ConcurrencyLimitLayer<tower_acc::Aimd> {
    tower_acc::ConcurrencyLimitLayer::new(
        tower_acc::Aimd::builder()
            .initial_limit(1 << 20)
            .max_limit(1 << 20)
            .build(),
    )
}
