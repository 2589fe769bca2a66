//! A policy whose state is made on use: a slot that has seen only a few
//! answers keeps the answers, and makes the state from them when it needs
//! it.
//!
//! A policy is a pure state machine: a fresh state fed the same samples in
//! the same order ends in the same state, bit for bit. So a slot does not
//! need its policy's state until its answers would take more room than
//! they do: until then it keeps the samples (40 bytes each) and, for each
//! new one, makes a fresh state, replays them, takes the new one in and
//! drops the state again. After [`EARLY`] answers it keeps the state. The
//! long tail of a broad crawl, hosts asked a handful of times, so costs a
//! few samples a slot instead of the whole state (the default policy's is
//! 424 bytes, and more once it meets overloads); a busy host pays the replays once, over its first
//! answers.

use std::fmt;

use super::{Policy, Sample, Throttle};

/// The answers a slot keeps before it makes its policy's state for good.
///
/// Replaying costs `1 + 2 + … + EARLY` samples taken in beyond the answers
/// themselves, once per slot, over its first `EARLY + 1` answers (10 for
/// 4: the first five answers take 15 samples in instead of 5); four
/// samples take 160 bytes, under two fifths of the default policy's state.
pub(crate) const EARLY: usize = 4;

/// Makes the fresh state that [`Lazy`] replays its answers into.
pub(crate) trait MakeState: Clone + fmt::Debug + Send + 'static {
    /// The state.
    type State: Policy;

    /// A fresh state, the same every time.
    fn fresh(&self) -> Self::State;

    /// What [`Policy::owns_overload`] of a fresh state answers (asked on
    /// every response, so answered without making one).
    fn owns_overload(&self) -> bool;
}

/// A policy that keeps its first [`EARLY`] answers instead of its state.
pub(crate) struct Lazy<M: MakeState> {
    make: M,
    stage: Stage<M::State>,
}

enum Stage<P> {
    /// The answers so far (none allocated while there are none).
    Early(Box<[Sample]>),
    Made(Box<P>),
}

impl<M: MakeState> Lazy<M> {
    pub(crate) fn new(make: M) -> Self {
        Lazy {
            make,
            stage: Stage::Early(Box::default()),
        }
    }

    /// A fresh state fed `answers`.
    fn replayed(&self, answers: &[Sample]) -> M::State {
        let mut state = self.make.fresh();
        for answer in answers {
            state.on_sample(answer);
        }
        state
    }
}

impl<M: MakeState> Policy for Lazy<M> {
    fn throttle(&self) -> Throttle {
        match &self.stage {
            Stage::Early(answers) => self.replayed(answers).throttle(),
            Stage::Made(state) => state.throttle(),
        }
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let answers = match &mut self.stage {
            Stage::Made(state) => return state.on_sample(sample),
            Stage::Early(answers) => std::mem::take(answers),
        };
        let mut state = self.replayed(&answers);
        let throttle = state.on_sample(sample);
        self.stage = if answers.len() < EARLY {
            let mut answers = answers.into_vec();
            answers.push(*sample);
            Stage::Early(answers.into_boxed_slice())
        } else {
            Stage::Made(Box::new(state))
        };
        throttle
    }

    fn owns_overload(&self) -> bool {
        match &self.stage {
            Stage::Early(_) => self.make.owns_overload(),
            Stage::Made(state) => state.owns_overload(),
        }
    }

    /// Makes the state at once: a warm start is taken before any answer,
    /// and is not one.
    fn warm(&mut self, learned: Throttle, latency: Option<f64>) {
        let answers = match &mut self.stage {
            Stage::Made(state) => return state.warm(learned, latency),
            Stage::Early(answers) => std::mem::take(answers),
        };
        let mut state = self.replayed(&answers);
        state.warm(learned, latency);
        self.stage = Stage::Made(Box::new(state));
    }
}

impl<M: MakeState> fmt::Debug for Lazy<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stage {
            Stage::Early(answers) => f
                .debug_struct("Lazy")
                .field("make", &self.make)
                .field("answers", answers)
                .finish(),
            Stage::Made(state) => fmt::Debug::fmt(state, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http::StatusCode;

    use super::*;
    use crate::policy::{Adaptive, Outcome};
    use crate::rng::next_unit;

    /// Seeded answers: latencies over three scales, a few overloads and
    /// errors, some with a pause, in flight from 1 to 40.
    fn answers(seed: u64, n: usize) -> Vec<Sample> {
        let mut rng = seed;
        let mut at = 0.0;
        (0..n)
            .map(|_| {
                let scale = [0.001, 0.05, 2.0][(next_unit(&mut rng) * 3.0) as usize];
                let latency = scale * (0.5 + next_unit(&mut rng));
                at += latency / 4.0;
                let u = next_unit(&mut rng);
                let sample = if u < 0.1 {
                    Sample::new(
                        Duration::from_secs_f64(latency),
                        StatusCode::SERVICE_UNAVAILABLE,
                    )
                    .with_pause(if u < 0.03 { 1.0 } else { 0.0 })
                } else if u < 0.13 {
                    Sample::error(latency, Outcome::Overload)
                } else {
                    Sample::new(Duration::from_secs_f64(latency), StatusCode::OK)
                };
                let in_flight = 1 + (next_unit(&mut rng) * 40.0) as usize;
                sample.with_in_flight(in_flight).with_at(at)
            })
            .collect()
    }

    #[test]
    fn the_replayed_state_answers_as_the_state_kept_from_the_start() {
        for seed in 1..=50 {
            let config = Arc::new(Adaptive::default().initial_concurrency(1 + seed as usize % 7));
            let mut kept = config.fresh();
            let mut lazy = Lazy::new(config.clone());
            assert_eq!(lazy.throttle(), kept.throttle());
            assert_eq!(lazy.owns_overload(), kept.owns_overload());
            for (i, sample) in answers(seed, 3 * EARLY).iter().enumerate() {
                assert_eq!(
                    lazy.on_sample(sample),
                    kept.on_sample(sample),
                    "seed {seed}, answer {i}"
                );
                assert_eq!(lazy.throttle(), kept.throttle(), "seed {seed}, answer {i}");
                assert_eq!(lazy.owns_overload(), kept.owns_overload());
                let made = matches!(lazy.stage, Stage::Made(_));
                assert_eq!(made, i >= EARLY, "seed {seed}, answer {i}");
            }
            // Once made, the state is the one kept, field for field.
            assert_eq!(format!("{lazy:?}"), format!("{kept:?}"));
        }
    }

    #[test]
    fn a_warm_start_makes_the_state_from_what_was_learned() {
        let config = Arc::new(Adaptive::default());
        let learned = Throttle::new(0.25, 12);
        let mut kept = config.fresh();
        kept.warm(learned, Some(0.1));
        let mut lazy = Lazy::new(config);
        lazy.warm(learned, Some(0.1));
        assert!(matches!(lazy.stage, Stage::Made(_)));
        assert_eq!(lazy.throttle(), kept.throttle());
        for sample in answers(7, 10) {
            assert_eq!(lazy.on_sample(&sample), kept.on_sample(&sample));
        }
    }

    #[test]
    fn an_early_slot_holds_its_answers_not_the_state() {
        let mut lazy = Lazy::new(Arc::new(Adaptive::default()));
        for sample in answers(3, EARLY) {
            lazy.on_sample(&sample);
        }
        let Stage::Early(answers) = &lazy.stage else {
            panic!("made after {EARLY} answers");
        };
        assert_eq!(answers.len(), EARLY);
        let early =
            std::mem::size_of::<Lazy<Arc<Adaptive>>>() + EARLY * std::mem::size_of::<Sample>();
        assert!(
            early < std::mem::size_of::<crate::policy::adaptive::Knee>(),
            "{early}"
        );
    }

    /// An early answer is kept as a whole `Sample`: its size is what each
    /// answer costs an early slot.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_sample_takes_forty_bytes() {
        assert_eq!(std::mem::size_of::<Sample>(), 40);
    }
}
