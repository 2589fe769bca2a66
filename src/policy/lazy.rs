//! A policy whose state is made on use: a slot that has seen only a few
//! answers keeps the answers, and makes the state from them when it needs
//! it.
//!
//! A policy is a pure state machine: a fresh state fed the same samples in
//! the same order ends in the same state, bit for bit. So a slot does not
//! need its policy's state until its answers would take more room than
//! they do: until then it keeps the samples (32 bytes each) and, for each
//! new one, makes a fresh state, replays them, takes the new one in and
//! drops the state again. After [`EARLY`] answers it keeps the state. The
//! long tail of a broad crawl, hosts asked a handful of times, so costs a
//! few samples a slot instead of the whole state (the default policy's is
//! 424 bytes, and more once it meets overloads); a busy host pays the replays once, over its first
//! answers.

use std::fmt;

use http::StatusCode;

use super::{Outcome, Policy, Sample, Throttle};

/// The answers a slot keeps before it makes its policy's state for good.
///
/// Replaying costs `1 + 2 + … + EARLY` samples taken in beyond the answers
/// themselves, once per slot, over its first `EARLY + 1` answers (10 for
/// 4: the first five answers take 15 samples in instead of 5); four
/// answers take 128 bytes, under a third of the default policy's state.
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
    Early(Box<[Answer]>),
    Made(Box<P>),
}

/// A [`Sample`] as an early slot keeps it: the same fields, the in-flight
/// count and the dispatch numbers in 32 bits, so 40 bytes instead of 56. A
/// sample whose numbers do not fit (none of an early answer's: the layer
/// counts in flight in 32 bits, and an early answer is among its slot's
/// first few) is not kept: the state is made at once instead, so the
/// replay stays exact.
#[derive(Clone, Copy)]
struct Answer {
    latency: f64,
    at: f64,
    pause: f64,
    in_flight: u32,
    status: Option<StatusCode>,
    outcome: Outcome,
    timed: bool,
    seq: u32,
    dispatched: u32,
}

impl Answer {
    /// The sample, kept as it is, if its in-flight count fits.
    fn keep(sample: &Sample) -> Option<Self> {
        Some(Answer {
            latency: sample.latency,
            at: sample.at,
            pause: sample.pause,
            in_flight: u32::try_from(sample.in_flight).ok()?,
            status: sample.status,
            outcome: sample.outcome,
            timed: sample.timed,
            seq: u32::try_from(sample.seq).ok()?,
            dispatched: u32::try_from(sample.dispatched).ok()?,
        })
    }

    /// The sample it keeps, bit for bit.
    fn sample(&self) -> Sample {
        Sample {
            latency: self.latency,
            status: self.status,
            outcome: self.outcome,
            timed: self.timed,
            in_flight: self.in_flight as usize,
            at: self.at,
            pause: self.pause,
            seq: u64::from(self.seq),
            dispatched: u64::from(self.dispatched),
        }
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.sample(), f)
    }
}

impl<M: MakeState> Lazy<M> {
    pub(crate) fn new(make: M) -> Self {
        Lazy {
            make,
            stage: Stage::Early(Box::default()),
        }
    }

    /// A fresh state fed `answers`.
    fn replayed(&self, answers: &[Answer]) -> M::State {
        let mut state = self.make.fresh();
        for answer in answers {
            state.on_sample(&answer.sample());
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
        self.stage = match Answer::keep(sample) {
            Some(answer) if answers.len() < EARLY => {
                let mut answers = answers.into_vec();
                answers.push(answer);
                Stage::Early(answers.into_boxed_slice())
            }
            _ => Stage::Made(Box::new(state)),
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
            std::mem::size_of::<Lazy<Arc<Adaptive>>>() + EARLY * std::mem::size_of::<Answer>();
        assert!(
            early < std::mem::size_of::<crate::policy::adaptive::Knee>(),
            "{early}"
        );
    }

    /// What each answer costs an early slot.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_answer_takes_forty_bytes() {
        assert_eq!(std::mem::size_of::<Answer>(), 40);
        assert_eq!(std::mem::size_of::<Sample>(), 56);
    }

    /// A kept answer gives back its sample bit for bit, edge values
    /// included; one whose count does not fit 32 bits is not kept.
    #[test]
    fn an_answer_keeps_its_sample_exactly() {
        let bits = |s: &Sample| {
            (
                s.latency.to_bits(),
                s.status,
                s.outcome,
                s.in_flight,
                s.at_secs().map(f64::to_bits),
                s.pause.to_bits(),
                s.order(),
            )
        };
        let odd = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE, 1e300];
        let mut samples = answers(11, 200);
        for (i, &x) in odd.iter().enumerate() {
            samples.push(Sample::error(x, Outcome::Ignore).with_pause(odd[(i + 1) % 6]));
            samples.push(Sample::from_secs_f64(x, StatusCode::OK).with_at(x));
        }
        samples.push(Sample::from_secs_f64(0.1, StatusCode::OK).with_in_flight(u32::MAX as usize));
        let max = u64::from(u32::MAX);
        samples.push(Sample::from_secs_f64(0.1, StatusCode::OK).with_order(3, 7));
        samples.push(Sample::from_secs_f64(0.1, StatusCode::OK).with_order(max, max));
        for sample in &samples {
            let kept = Answer::keep(sample).expect("fits").sample();
            assert_eq!(bits(&kept), bits(sample), "{sample:?}");
            assert_eq!(format!("{kept:?}"), format!("{sample:?}"));
        }
        let big = Sample::from_secs_f64(0.1, StatusCode::OK).with_in_flight(u32::MAX as usize + 1);
        assert!(Answer::keep(&big).is_none());
        let late = Sample::from_secs_f64(0.1, StatusCode::OK).with_order(1, max + 1);
        assert!(Answer::keep(&late).is_none());
    }

    /// An answer that cannot be kept makes the state at once, and it
    /// answers as one kept from the start.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_answer_that_cannot_be_kept_makes_the_state() {
        let config = Arc::new(Adaptive::default());
        let mut kept = config.fresh();
        let mut lazy = Lazy::new(config);
        let mut samples = answers(5, 8);
        samples[1] = samples[1].with_in_flight(1 << 40);
        for (i, sample) in samples.iter().enumerate() {
            assert_eq!(lazy.on_sample(sample), kept.on_sample(sample));
            assert_eq!(matches!(lazy.stage, Stage::Made(_)), i >= 1);
        }
        assert_eq!(format!("{lazy:?}"), format!("{kept:?}"));
    }
}
