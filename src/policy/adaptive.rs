//! The crate's own policy: a knee controller that finds a host's capacity by
//! Little's law and keeps its queue near empty, adapting both concurrency
//! and delay, with overload handled in the same state machine.

use std::cell::RefCell;
use std::sync::Arc;

use super::lazy::{Lazy, MakeState};
use super::params::{policy_params, within};
use super::{Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// The default policy: a *knee controller*. It finds how many requests
    /// a host serves at once, keeps the host's queue near empty, follows the
    /// host when it gets slower or faster, and tells overload from noise.
    ///
    /// # The model
    ///
    /// A host serves `C` requests at once in a mean time `T₀` (its no-load
    /// latency); requests beyond `C` wait in a queue. With `n` in flight,
    /// Little's law gives a mean latency `T = T₀ · max(1, n / C)`: flat up to
    /// the *knee* `C`, then growing. The policy keeps one control variable,
    /// the *level* `λ`, the requests it aims to have in flight: the limit is
    /// `round(λ)`, and below 1 the level is a rate (one request every
    /// `T₀ / λ`, with the `T₀` measured when the level went below 1: a
    /// rate limit's rate does not move when the latency is measured
    /// afresh, so neither does the spacing). It learns `T₀` and the noise
    /// of latencies from samples
    /// that cannot hold a queue of its own, and the knee from samples that
    /// do: at a level with mean in flight `n̄` and mean latency `T̄`, the
    /// host serves `Ĉ = n̄ · T₀ / T̄` at once. Errors (429, 503, timeouts,
    /// resets) are partly random and partly caused by load; only a rate of
    /// them above what noise explains, or a server's explicit `Retry-After`,
    /// is an overload.
    ///
    /// # The rules
    ///
    /// Latencies are compared in log space (a scale change is a shift there,
    /// and heavy tails become moderate), with the mean and variance of
    /// `ln(latency)` kept by Welford's method: O(1) per sample, no buffer.
    /// Tests are Student's t (two samples, pooled variance).
    ///
    /// - **Windows.** A window is the set of requests *sent* at a level from
    ///   when it opens. Once enough were sent to see a queue of 2 at two
    ///   standard errors with 84 % power (more where latencies are noisier,
    ///   at most 8 round trips), it closes, and it is judged when every one
    ///   of them is back: the count in flight at each answer says how many
    ///   are still out. Judging on the answers that come first would leave
    ///   out the slow ones and read a heavy tail as a host that got faster.
    ///   A request cancelled without an answer leaves the count in flight; a
    ///   window waits at most twice its slowest answer. Answers to requests
    ///   sent before the window opened are stale; after a cut, the first
    ///   round trip (a queue draining) is skipped too. Which requests were
    ///   sent before a window opened or after it closed is told by their
    ///   dispatch numbers in the slot, which the layer stamps on each
    ///   sample (by send times, `at - latency`, without them): requests
    ///   sent at the instant a window closes (a paused clock, a timer's
    ///   tick) may have gone out before or after, and one sent after,
    ///   taken for the window's, stands for one of its slow answers still
    ///   out. (On the simulator's paused clock, the window that replaced
    ///   Startup's reference on a Pareto host of 64 workers was judged with
    ///   12 of its requests still out and 12 quick ones of the next window
    ///   in their place: a reference 6 % quick, and every window after read
    ///   as a queue, down to 46 % of the oracle.)
    /// - **Reference.** The no-load latency and noise come from the first
    ///   answer and Startup's clean rounds (provisional: their short rounds
    ///   miss slow answers), then from the first whole Cruise window unless
    ///   it holds a queue at three standard errors, from windows sent one at
    ///   a time (no queue of ours can form: before any overload, one that
    ///   differs from a reference of fewer than 8 answers replaces it at
    ///   once, and Startup, which ended against that reference, resumes;
    ///   a backend's first answers on new connections may all be quicker
    ///   than its reused connections will answer, by Nagle's algorithm
    ///   and delayed ACKs, and judged against them every window would
    ///   show a queue), and from a window at two thirds of the
    ///   level every `max(10 s, 50 round trips)` (BBR's ProbeRTT, which
    ///   goes to half its window; here the level already sits at the knee,
    ///   so a third below it holds no queue of ours; put off while a run of
    ///   answers far from the reference is under way, which a window at the
    ///   level judges first): merged when it agrees, replacing the
    ///   reference when it is three standard errors below (the host got
    ///   faster; with fewer than 16 answers, what replacing a reference
    ///   takes, the window goes on until it holds them: at a level below
    ///   8 its two round trips hold fewer; between two and three standard
    ///   errors below, too far to merge and too near to replace, it goes
    ///   on, up to three times its round trips, until it is one or the
    ///   other: a reference that held a queue of one on 16 workers, 7 % of
    ///   the latency, stayed 2.2 standard errors above each re-measure of
    ///   22 answers, and the level a request above the knee, a mean queue
    ///   of 1.15), and, when it is above, half
    ///   of that again tells a slower host from a smaller one unless its
    ///   latency alone tells (see *verify*); either way the next one waits
    ///   its interval. A window above
    ///   the reference whose log latencies are also more spread than any
    ///   queue makes them replaces the reference instead of cutting: the
    ///   reference missed a tail the window holds (Startup's short rounds on
    ///   a Pareto host kept a log spread of 0.3 where the host's is 0.6,
    ///   and every whole window after read as a queue). A queue that moves
    ///   the mean of log latency by `d` adds at most `d²` to its variance,
    ///   and mostly narrows it; the excess is tested at three standard
    ///   errors, each variance's taken at a kurtosis of 9 (an exponential,
    ///   the log of a Pareto tail), so a normal's spread needs a larger
    ///   excess than the test could see.
    /// - **Startup.** From `initial_concurrency`, the level grows each round
    ///   trip whose window is clean and in use: it doubles up to 8, grows by
    ///   8 up to 32, then by a quarter (RFC 3742's limited slow start, with
    ///   HyStart++'s ¼ growth as the floor). A window three standard errors
    ///   above the reference with an estimated queue of half a request ends
    ///   it (at two, the score of tests on the way to a knee of 1 000 would
    ///   end it falsely one time in three); within a round, five standard
    ///   errors end it at once. The level goes to `Ĉ` less what noise cannot
    ///   resolve, never below the last clean level (to that level when the
    ///   round was cut short). A raised level's window begins after the
    ///   request that the raising answer frees: it goes out with the level
    ///   before the raise in flight, ahead of the raise's requests, and
    ///   does not see their queue.
    ///   An exit on few answers (fewer than 10 in the window and the
    ///   reference together; with fewer than 6, the likelier of no queue
    ///   and a queue of one decides) is judged again once a window sent at
    ///   the lower level has replaced the reference (8 answers when it was
    ///   fewer): unless the window that ended Startup is now nearer a
    ///   queue of one than none by a standard error (the noise of a few
    ///   answers leaves most such verdicts in doubt, and a doubtful exit
    ///   costs more kept than tested again), the exit is taken for noise,
    ///   and Startup resumes from there (a first answer quick by chance
    ///   left heavy-tailed hosts of 8 workers at one request in flight for
    ///   seconds, at a quarter of their speed). The resumed Startup's
    ///   rounds that are nearer a queue of one than none, short of ending
    ///   it, still raise, but do not join its reference: taken in, they hid
    ///   the queue of a host of one worker with the same tails from every
    ///   round after, and the level doubled to 8 on it. As after the first Startup, the first
    ///   whole window in Cruise may replace the reference.
    ///   Above 32, where latencies are steady, a level's window need not
    ///   wait two round trips (one for its requests to go out at the
    ///   level, one for them to come back): it opens when the limit is
    ///   full (a request sent while it filled can pass ahead of the queue
    ///   the raise makes), takes just enough requests to see the raise's
    ///   overshoot at a knee just above the last clean level (latencies
    ///   `λ / clean` apart, at three standard errors with 84 % power, at
    ///   least 8), and is judged when all of them are back, about one round
    ///   trip after the raise. Such a window raises by a quarter, as a round
    ///   does: the overshoot it finds lasts one round trip where a round's
    ///   lasts two (a raise by a half, the same queue for the same time,
    ///   left a host of 512 workers a standing mean queue of 1.8 in a
    ///   20-second crawl, against 0.9 before). Startup's rounds miss the
    ///   slow answers of their last part, a bias of about `σ²` towards
    ///   quick answers in the reference; these windows are taken only
    ///   where that is below half their standard error (`σ` of the log
    ///   latency below about 0.14). When one ends Startup, its requests
    ///   still out are taken in as they come back (each was sent with the
    ///   level in flight, so each tells the knee by Little's law), and the
    ///   whole window sets the knee, and the level if Cruise has not moved
    ///   it.
    /// - **Cruise.** A window with a queue (two in a row at two standard
    ///   errors, one at three, or part of one at five once Startup's
    ///   reference is replaced) cuts the level; a
    ///   clean window in use (below one standard error) raises it by a step
    ///   that doubles with each clean window in a row, closing half the gap
    ///   to a known knee; at the knee, a probe one above it comes every 4
    ///   to 16 windows (doubling after each probe that finds a queue, back
    ///   to 4 when a cut puts the knee below half of what it was), and a
    ///   probe clean in two windows in a row forgets the knee (the host
    ///   grew). One clean window is not enough: a probe one above a knee
    ///   holds a queue of one, a few per cent of the latency; where that
    ///   is two standard errors of a window, one window in six still
    ///   reads as clean (below one), and a knee forgotten lets the steps
    ///   double past it (a probe at 9 on 8 workers read clean once, and
    ///   10 in flight held a queue of 2); as for a cut, two windows in a
    ///   row tell. After a clean probe the level still climbs one step a
    ///   window up to 1.02 times the knee it forgot, and doubles its steps
    ///   only beyond: the probe shows the host grew, not by how much, and
    ///   at a knee above 50 one request more is a queue under 2 % of the
    ///   latency, which no window of a hundred answers resolves. A probe
    ///   that finds
    ///   a queue goes back to the level it left, which window after window
    ///   found clean, and that level is the knee: its own estimate of the
    ///   knee moves with the noise of one window (a probe at 9 whose
    ///   answers came out a tenth slow puts a knee of 8 at 7.3), and left
    ///   below, the level stayed a request short until the next probe, up
    ///   to 16 windows later.
    /// - **Large changes.** Answers in a row above twice the reference's
    ///   typical latency cut at once, unless no queue of ours explains
    ///   them (see *Cut, then verify*: a latency up tenfold at 8 in
    ///   flight). Those, and answers in a row below half of it (or above
    ///   twice it, one request at a time), open a fresh window at the
    ///   level, of at least 16 answers, and that window, judged whole,
    ///   replaces the reference if it differs, or if no queue of ours
    ///   explains it either (the run itself is chosen by
    ///   its latency: taken as the reference, a run of noise would make the
    ///   next answers look like a queue). A window at the level that shows
    ///   a quicker host (this one, or any three standard errors below the
    ///   reference) is followed at once by the re-measure below the level:
    ///   the level may stand above the knee (a probe, or a knee that noise
    ///   put a request high), and then the window held a queue of ours (8
    ///   workers whose latency fell from 1 s to 100 ms at a level of 9.15
    ///   left a reference of 113 ms, and the level climbed to 10, a queue
    ///   of 2 read as none, for 20 s). The run is long enough that noise
    ///   of the reference's spread makes one less than once in a million
    ///   round trips, that is once in a million answers per request in
    ///   flight (6 for a steady host; 10 for a log-normal σ 0.8 at 8 in
    ///   flight, 13 at 1 000): a false alarm as rare in time at a thousand
    ///   in flight as at one. Counted per answer, a host of a thousand
    ///   workers with heavy tails was cut by half every minute or so for
    ///   nothing, each cut costing seconds to verify and climb back. A run
    ///   is judged once its last instant is over (at the next answer that
    ///   comes later): the answers of one instant (a timer's tick, a batch
    ///   of responses read together) come in no order the odds can rely
    ///   on. A batch sorted by send time hands over its slowest answers
    ///   first, and at ten thousand answers a second made a run of them
    ///   every few seconds; a quick answer of the same instant breaks it.
    /// - **Cut, then verify.** A cut goes to `Ĉ` less what noise cannot
    ///   resolve, by at most half and never below 1 (one request at a time
    ///   holds no queue of ours). A cut is a hypothesis: if the latency at
    ///   the lower level stays where it was instead of falling as Little's
    ///   law predicts, a window at half that level tells: a queue's latency
    ///   halves with the level, a slower host's does not (the threshold is
    ///   halfway, `ln 2 / 2`; a fall beyond the noise is a queue too, when
    ///   the window at the lower level held half a request or more: a
    ///   level a few per cent above the knee holds a queue that is a few
    ///   per cent of its latency). Either fall tells a queue only when it
    ///   is beyond the noise (two standard errors) and the window at the
    ///   lower level was above the reference beyond doubt (five): one
    ///   less sure was chosen for being slow, and the window after it is
    ///   quicker by regression alone. A window at half slower than the one
    ///   it tests, beyond the noise (two standard errors), tells neither:
    ///   halving cannot make a host slower, so that window was taken while
    ///   the latency still rose (a capacity that just fell, its queue still
    ///   building); the window at half takes its place, and half of the
    ///   level again tells. A window at half three standard
    ///   errors and more than `ln 2 / 2` below the reference, with 16
    ///   answers or more, replaces it first (it held a queue), and the
    ///   window above is judged against it. A slower host gets a new reference (both
    ///   windows) and its level and knee back. A window at half that
    ///   falls less than that but ends nearer the reference than the
    ///   window it tests (halfway between that window and what a queue
    ///   would leave: its latency halved, not below the reference), once
    ///   it holds 16 answers (what replacing a reference takes; with fewer
    ///   it waits for more, unless the reference holds fewer answers than
    ///   the windows above it, which then make the reference of a slower
    ///   host), shows no slower host: the reference stays (made of both
    ///   windows, it would
    ///   hold the queue, as a raise's queue of 1 % on a thousand workers
    ///   did, read as clean for 50 s after), and the level and knee come
    ///   back for the windows at the level to judge afresh; unless the
    ///   window that cut was above the reference too: two windows in a
    ///   row above it are a queue, as at the level, and the cut stands.
    ///   Any window (at the level,
    ///   at the lower level, or the re-measure below the level) tells
    ///   alone, and cuts nothing, when no
    ///   queue of ours explains its latency: a host serves at least one
    ///   request at a time, so with `n̄` in flight Little's law bounds the
    ///   mean latency by `n̄ · T₀`, and the mean of `ln(latency)` lies below
    ///   the log of the mean (Jensen: the wider the spread, the looser the
    ///   bound, never the tighter). A mean of `ln(latency)` three standard
    ///   errors above `ln(n̄ · T₀)` (as for any reference replaced) is a
    ///   slower host, and the window at half would only cost its round
    ///   trips. That window becomes the new reference once, with the
    ///   answers that follow it (at two thirds of the level to come back
    ///   to, the re-measure's, when it was taken lower), it holds 16 (what
    ///   replacing a reference takes elsewhere: the re-measure's 8 alone
    ///   let probes above the knee pass for clean), and the level and knee
    ///   come back (a latency up tenfold at 8 in flight, 1 s a round trip:
    ///   back at 8 about 2 s sooner). When the cut was a probe's, the level
    ///   that comes back is the one the probe left, and a reference taken
    ///   during a probe is scaled by `knee / level` first: with the same
    ///   workers, the probe's queue made every answer that much longer
    ///   (Little's law). Taken as it was, latency up tenfold during a
    ///   probe at 9 on 8 workers left a reference 13 % high, and the next
    ///   probe held a queue of 2 for 14 s, read as clean.
    ///   While a cut is under test, a run of answers above twice the
    ///   typical latency of the window that made it (or of the reference,
    ///   whichever is higher) cuts at once, as outside a test, unless no
    ///   queue of ours explains it: a cut's queue only drains, so answers
    ///   sent at the lower level that slow beyond it tell a capacity that
    ///   fell since, and the window under test, a round trip at that
    ///   latency away, comes too late (256 workers at 100 ms falling to
    ///   64 while a probe's cut was under test held a queue of 189 for
    ///   1.2 s). The run is the one above (as long, and judged the same).
    /// - **Overload.** 429, 503 and timeouts are overloads; the layer tells
    ///   this policy each one with the `Retry-After` pause it brought, and
    ///   leaves the reaction to it. An overload answered to a request sent
    ///   before the last reaction belongs to that event. An event is a
    ///   pause, or Page's CUSUM of overloads crossing a likelihood ratio of
    ///   1 000 to 1 between a share of 2 % (BBRv2's loss threshold: noise)
    ///   and 8 %: random errors at 2 % essentially never make one, a load
    ///   that refuses a tenth of requests makes one within about 70 answers.
    ///   A pause when nothing was served since the last one (a server that
    ///   refuses everything for now) changes nothing but the wait. Else the
    ///   level goes to what the host served lately: its successes per
    ///   second over the last two to four round trips (or 8 to 16 sends, at
    ///   a rate) at the no-load latency (Little's law), less one standard
    ///   error of their count. Without a pause, at a rate (a level below
    ///   1, where the delay spaces every request), the share of the
    ///   level's answers that were served says it better: a rate limit of
    ///   `R` serves `R / r` of a rate `r` above it, so the level goes to
    ///   the level times that share, at least (and above one request in
    ///   flight, where a refused request frees its place at once and
    ///   answers over-count refusals, only when nothing else is known).
    ///   When none of them was served (`n ≥ 4` refused in a row at a
    ///   rate), the share is Laplace's rule of succession, `1 / (n + 2)`,
    ///   and raises stay free up to the rule of three, `3 / n` of the
    ///   level, or β (the 95 % bound of a share none of `n` showed): a
    ///   client that starts at thousands of requests a second against a
    ///   rate limit of 20 finds it in a few events, not a score of cuts by
    ///   β. After a pause, at least by β = 0.7 when that count began with the
    ///   pause before (it may hold the burst a token bucket allowed then);
    ///   without a pause, never below the last clean level and at most by
    ///   β (BBRv2's bound on a round's cut), and above a rate no higher
    ///   than the level served since the first overload of the episode
    ///   (from the first overload after the CUSUM's score, kept through
    ///   its events, last stood at zero): `(k + 1) / t` at the no-load
    ///   latency, the posterior mean of a Poisson rate after `k` successes
    ///   in `t` seconds, counting the requests still out as served (a
    ///   refusal comes back at once, a success may queue). Once a token
    ///   bucket refuses, its burst is spent and it passes its rate; once a
    ///   server refuses beyond its places, they are full: either way what
    ///   passed since the first refusal is the host's rate, where what was
    ///   served over the last round trips still holds the burst (a client
    ///   at 2 in flight against nginx's `limit_req` answering in a
    ///   millisecond cut by 5 to 10 % an event, a refusal each, and 136 of
    ///   the first 158 requests were refused). The answers to the requests in
    ///   flight at the event may lower it further by the share of them
    ///   refused.
    /// - **Before and between events.** An overload answer comes back at
    ///   once and frees its place: sent again at once, the place is
    ///   refused again, and nginx logged 27 refusals in 2 ms at loopback
    ///   speed before the CUSUM's fifth. So while overloads are most of the
    ///   answers since the score last stood at zero, from the second on,
    ///   each holds its place (the gate's limit is the level less those
    ///   overloads, at least 1): only the requests already out are refused
    ///   until the event; a random error holds nothing. At a rate, a
    ///   refusal sent after an event with no success since is an event of
    ///   its own, to the rate since the episode's last success (or its
    ///   first refusal, before any): `1 / t` with nothing passed in `t`,
    ///   half the last rate, as each spacing was refused after the one
    ///   before. From thousands of requests a second to a rate limit of
    ///   20, one refusal a halving instead of five. (Counted from the
    ///   episode's first refusal with a success in between, `(k + 1) / t`,
    ///   each refusal took only about a third off: 7 such events on the
    ///   way down on the simulator's limit-req-fast, seed 4, whose crawl
    ///   had 2.06–2.82 % refused on 19 seeds of 90.) The same at a limit
    ///   of one, where nothing else of ours is out: the refusal cannot be
    ///   for a place that a success of ours held, and the next request goes
    ///   at once (in two of nginx's logs, 2 and 7 requests were refused
    ///   there on the way down from Startup before the CUSUM's next event).
    ///   And two intervals between refusals at one rate that passed the
    ///   same count within one, two or more each, are a token bucket's
    ///   clockwork, not noise (see `periodic`): the level goes to the rate
    ///   they passed. (From two, not four: at 35 ms a request against
    ///   nginx's 20 a second, refused one in three, it took the CUSUM's six
    ///   refusals where three tell the rate.)
    /// - **Token buckets.** Many servers that send `Retry-After` ration
    ///   requests with a token bucket (rate `R`, burst `B`: nginx's
    ///   `limit_req`, Envoy's local rate limit, API gateways). Between two
    ///   pauses the slot sends an *episode*: sent at one level, it ends
    ///   refused, so that level was above `R` throughout, and it passed
    ///   `n = B + R·t` requests in its `t` seconds, within one (the refused
    ///   request found less than a token). The same `B` each time, two
    ///   episodes give `R = Δn / Δt`, known within a tenth when `Δn ≥ 10`.
    ///   The episode is paired with the shortest seen, so the estimate
    ///   sharpens as episodes lengthen. When two fit (`R > 0`, `B > 0`), a
    ///   pause takes the level to `R` at the no-load latency instead of
    ///   what was served less its error, and that is its ceiling: kept
    ///   there, the bucket refuses no more; if `R` came out high, the next
    ///   episode is long and the estimate closer. An episode that passed
    ///   nothing (a server refusing everything for now) starts the count
    ///   afresh.
    /// - **Probes above an overload.** Raises up to what was served (or
    ///   the bucket's rate, or at a rate without a pause the share served,
    ///   not the count, which still holds the burst the limit allowed
    ///   first) stay free; above it they are probes, by
    ///   bisection towards the level that failed, paid from a budget of
    ///   0.5 % of answers (an event costs its overloads and, with a pause,
    ///   the answers the pause kept from being sent at the level's rate),
    ///   no sooner than 20 pauses after the event, and only while the
    ///   overloads of all events so far are within 0.5 % of all answers
    ///   since the first, plus one (the refusals that found a rate limit
    ///   at the start, 1.6 % of a crawl of 1 000 on the simulator's
    ///   limit-req-fast, are paid before the first probe). Except after an
    ///   event at a rate whose refusals came in runs of one length, each
    ///   ended by a single success (two runs or more): that is what a
    ///   bucket holding one token, nginx's `limit_req` without `burst`,
    ///   serves of any rate `r` from `k − 1` to `k` times its own, so up to
    ///   half the rate may lie unused above the cut to `r / k`, and none at
    ///   `r / (k − 1)` or above. Three probes then go at once between the
    ///   two, each sent back at its first refusal, and the level they find
    ///   is kept below the one that failed (see `FREE_PROBES`). Overload
    ///   answers never enter latency statistics, but they count against
    ///   their window: one refused more often than noise explains (one
    ///   standard error above the tolerated 2 %) neither raises the level
    ///   nor counts as clean, and above a clean level it sends the level
    ///   back there (at a rate, to the share served less one standard
    ///   error, if higher), with the level it left as the one that failed:
    ///   the errors came with the raise, whatever the CUSUM still
    ///   tolerates.
    /// - **Delay.** At a level of 1 or more the delay paces a window's
    ///   requests over half the no-load latency, `T₀ / (2λ)` (BBR's pacing
    ///   gain of 2); below a millisecond (tokio's timer resolution) there
    ///   is none. In Cruise, up to the top raises go to, the answers clock
    ///   it ([`Throttle::paced`]): a request that takes the place an answer
    ///   freed goes at once, and the delay spreads only a raise's requests
    ///   (spacing every request, it held one back whenever two answers came
    ///   back closer together than the delay, and left a worker idle: about
    ///   a tenth of the capacity at the knee). Startup and probes above the
    ///   knee space every request. Below 1 the delay is the
    ///   rate, `T₀ / λ`, with the `T₀` of when the level went below 1 (a
    ///   re-measured latency moves no rate limit), and spaces every request.
    ///   Both are kept within `[min_delay, max_delay]`; a `min_delay` above
    ///   zero spaces every request.
    ///
    /// There is no default cap: the level grows only while its limit is in
    /// use, so it stays within a step of what the host serves, and a host of
    /// 1 000 workers gets about 1 000 in flight. What bounds it then is
    /// `max_concurrency` if set, the global `max_pending`, and the client's
    /// own connection limits (sockets, HTTP/2 streams), which show as
    /// latency and are found like a knee.
    ///
    /// Zero or non-finite latencies and ignored outcomes (other 5xx, errors
    /// that say nothing about load) change nothing. The policy reads no
    /// clock: the time comes in each [`Sample`] (`at`), stamped by the layer
    /// or given by a replayed trace.
    ///
    /// A start delay is raised to `min_delay`; one above `max_delay` is
    /// refused.
    ///
    /// | parameter | default |
    /// |---|---|
    /// | `start_delay` | 0 |
    /// | `min_delay` | 0 |
    /// | `max_delay` | 60 s |
    /// | `initial_concurrency` | 2 |
    /// | `max_concurrency` | unbounded (`usize::MAX`) |
    pub struct Adaptive("adaptive") {
        delays { start: 0.0, min: 0.0, max: 60.0, }
        concurrency { initial: 2, max: usize::MAX, }
    }
}

impl Adaptive {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if self.start_delay > self.max_delay {
            return Err(ConfigError::new(
                "start_delay",
                format!(
                    "must not be above max_delay ({}), got {}",
                    self.max_delay, self.start_delay
                ),
            ));
        }
        if self.initial_concurrency > self.max_concurrency {
            return Err(ConfigError::new(
                "initial_concurrency",
                format!(
                    "must not be above max_concurrency ({}), got {}",
                    self.max_concurrency, self.initial_concurrency
                ),
            ));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`: made on use (see
    /// [`Lazy`]), from these parameters shared by the slots that have them.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(Lazy::new(self.shared()))
    }

    /// These parameters, shared: the slots a layer makes on a thread hold
    /// one copy of them (a pointer each, where a copy takes five words).
    /// Slots made with other parameters get a copy of their own.
    fn shared(&self) -> Arc<Adaptive> {
        thread_local! {
            static LAST: RefCell<Option<Arc<Adaptive>>> = const { RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some(shared) if **shared == *self => Arc::clone(shared),
                _ => Arc::clone(last.insert(Arc::new(self.clone()))),
            }
        })
    }

    /// A fresh controller.
    fn knee(&self) -> Knee {
        let max = self.max_concurrency.max(1) as f64;
        let level = (self.initial_concurrency.max(1) as f64).min(max);
        Knee {
            phase: Phase::Startup,
            level,
            clean: None,
            level_since: 0.0,
            since_seq: 0,
            dispatched: 0,
            draining: false,
            round_start: 0.0,
            last_at: 0.0,
            reference: Acc::default(),
            window: Acc::default(),
            max_in_flight: 0,
            sends: Sends::default(),
            slowest: 0.0,
            counted: 0,
            refused: 0,
            old: 0,
            closed: None,
            after: None,
            in_flight: 0,
            above: 0,
            beyond_cut: 0,
            below: 0,
            run: Acc::default(),
            run_at: f64::NEG_INFINITY,
            cruising: None,
            resumed_on_noise: false,
            ramp: Ramp::Round,
            remeasuring: false,
            provisional: true,
            bucket_start: 0.0,
            bucket: 0,
            prev: 0,
            prev_len: 0.0,
            resumed_served: 0,
            events: None,
            episode: None,
            answers_since_event: 0,
            run_answers: 0,
            run_errors: 0,
            rate_unit: f64::NAN,
            delay: self.start_delay.max(self.min_delay),
            limits: Limits {
                min_delay: self.min_delay,
                max_delay: self.max_delay,
                max_concurrency: self.max_concurrency,
            },
        }
    }
}

/// Two standard errors: a cut on a window that holds no queue one time in 44.
const Z_CUT: f64 = 2.0;
/// The windows see a queue of 2 with this much more margin: 84 % power.
const Z_POW: f64 = 1.0;
/// Startup ends on a window three standard errors above the reference:
/// it tests a window every round trip, a score of times before it meets a
/// knee of 1 000, and at two a false exit would come one time in three.
const Z_EXIT: f64 = 3.0;
/// A queue beyond doubt, acted on at once.
const Z_SURE: f64 = 5.0;
/// A window raises the level only below one standard error.
const Z_UP: f64 = 1.0;
/// A window replaces the reference, the host having got faster, only three
/// standard errors below it (one window in 740 by chance).
const Z_REBASE: f64 = 3.0;
/// A large change is acted on at once: when answers in a row took more than
/// `FAST_FACTOR` times (or less than its inverse) the reference's typical
/// latency, as many as noise of the reference's spread makes less than once
/// in `1 / FAST_ODDS` round trips, `level / FAST_ODDS` answers (a normal
/// tail in log space), and at least `FAST_RUN`; a fourfold capacity drop or
/// a tenfold drift does it at once.
const FAST_RUN: u32 = 6;
const FAST_ODDS: f64 = 1e-6;
const FAST_FACTOR: f64 = 2.0;
/// An estimated queue below half a request is no queue.
const Q_MIN: f64 = 0.5;
/// The queue a clean window must be able to see, in requests.
const Q_SEE: f64 = 2.0;
/// Startup grows the level by `min(λ, max(Q_RAMP, λ / 4))` per round trip
/// (above 32 on steady hosts, after a window sized to the raise that takes
/// about one round trip instead of two, see [`Knee::sized_ramp`]).
const Q_RAMP: f64 = 8.0;
/// Overloads up to this share of answers are noise (BBRv2's loss threshold).
const E_TOL: f64 = 0.02;
/// The share of overloads the CUSUM is tuned to detect: four times the
/// tolerated one.
const E_SEE: f64 = 4.0 * E_TOL;
/// An overload event takes the level to the rate served lately when at
/// least this many were served (else to the last clean level, or by β)...
const MIN_DELIVERED: u64 = 8;
/// ...counted in buckets of this many round trips (or sends, at a rate).
const BUCKET_ROUNDS: f64 = 2.0;
const BUCKET_SENDS: f64 = 8.0;
/// The share served among the answers to an event's requests in flight is
/// used from this many answers.
const MIN_BATCH: u32 = 4;
/// The share served of the answers at a level is used from this many.
const MIN_SHARE_RUN: f64 = 4.0;
/// Two intervals between refusals at one rate tell a token bucket's rate
/// (see [`Knee::periodic`]) when each passed at least this many. The rate
/// they passed is the bucket's within one request over both, since a
/// bucket that passes two requests in a row keeps the tokens a refused one
/// leaves (a bucket that holds less than two, nginx's `limit_req` without
/// `burst`, passes one in two of any rate between its own and twice it:
/// strict alternation bounds the rate from below only, and the share
/// served covers it). Random errors meet the test about one time in thirty
/// at 2 %, whatever this minimum: two geometric intervals within one of
/// each other; their cut is by the share they passed, a few per cent.
const MIN_CLOCKWORK_RUN: u64 = 2;
/// Runs of refusals at one rate, each of the same length and ended by a
/// single success, at least this many of them, are a bucket that holds a
/// single token: see [`FREE_PROBES`].
const MIN_LONE_RUNS: u32 = 2;
/// After an event on a bucket of one token (see [`Lone`]), this many
/// probes above the level go without waiting for the probe budget. A
/// bucket that holds a single token (nginx's `limit_req` without `burst`,
/// its stock setting) loses the tokens a refused request finds, so it
/// passes exactly one request in `k` of any rate `r` from `(k − 1)·R` to
/// `k·R` (one in two up to twice its rate `R`): the share served, `1 / k`,
/// bounds `R` from below only, and `r / (k − 1)` from above. The event's
/// cut to `r / k` may leave up to half the rate unused (the unit grid's
/// buckets of one token were served 0.50 to 0.98 of theirs, 0.79 on
/// average) for as long as the budget makes probes wait, longer than a
/// crawl. Bisection between the two bounds leaves `R` within a quarter of
/// their gap above the level in two probes, within an eighth in three, so
/// the level is at least 8/9 of `R`; a failed probe costs one refusal (see
/// [`Events::free_probe`]). Three, not two: the halving descent onto a
/// rate (see *Before and between events* in [`Adaptive`]) lands anywhere
/// in a factor of two, and two probes left ten seeds of 45 of the
/// simulator's limit-req-stock at 0.86 of the rate (a landing at 58 ms a
/// request on a bucket of 50 ms, both probes refused). A bucket that banks
/// tokens, sent at about `k` times its rate, runs the same pattern and pays
/// for each probe; with the descent's refusals halved, limit-req-fast pays
/// for the third within its 2 % (with three before the halving descent,
/// it lost its goal on five seeds of fifteen).
const FREE_PROBES: u8 = 3;
/// The CUSUM's threshold: a log-likelihood ratio of 1000 to 1.
const H_EVENT: f64 = 6.907_755_278_982_137;
/// The cut of an overload when no cleaner level is known (BBRv2, CUBIC).
const BETA: f64 = 0.7;
/// Probes above an overload ceiling cost at most this share of answers
/// (a pause counted as the answers it kept from being sent).
const E_BUDGET: f64 = 0.005;
/// …and come no sooner than this many pauses after the event.
const PAUSE_SPACING: f64 = 20.0;
/// Two episodes between pauses tell a token bucket's rate when the longer
/// passed at least this many requests more than the shorter: each count is
/// within one request of `B + R·t` (the refused request finds less than a
/// token), so the rate is then known within a tenth.
const BUCKET_COUNT: f64 = 10.0;
/// The pacing gain: a window's requests spread over half a round trip.
const G_PACE: f64 = 2.0;
/// tokio's timer resolution, in seconds: pacing finer than this is dropped.
const TIMER_RESOLUTION: f64 = 0.001;
/// The reference forgets: it weighs at most this many answers.
const REFERENCE_MAX: f64 = 4096.0;
/// A window holds at most this many round trips of answers before it is
/// judged with what it has.
const MAX_ROUNDS_PER_WINDOW: f64 = 8.0;
/// The no-load latency is re-measured at [`BASE_GAIN`] times the level
/// at least this often, in seconds (BBR's min-RTT window), and in round
/// trips; the window there holds two round trips of answers, so with the
/// drain before it and the wait for its last answers the level is lowered
/// for about four round trips: at two thirds, about one and a third round
/// trips of throughput lost per interval, under 1.5 % below 200 ms a round
/// trip and under 3 % from there up, where the interval is 50 round trips
/// (derived; at half, these were measured at 1.5 % on the simulator's
/// `fixed` and 3.5 % on `bdp` and `huge` against runs without a
/// re-measure).
const BASE_INTERVAL: f64 = 10.0;
const BASE_ROUNDS: f64 = 50.0;
const BASE_PROBE_ROUNDS: f64 = 2.0;
/// A re-measure's window between two and three standard errors below the
/// reference goes on for at most this many times its round trips. Where
/// the window's variance is most of the test's, three times its answers
/// make a difference of two standard errors one of up to 3.5, past
/// [`Z_REBASE`]; one that is noise falls back towards the reference
/// instead. In the band still after that, the window is taken in neither
/// way, as before. (Counted in answers, at one request in flight the 8 a
/// re-measure takes there would have gone on to 24 round trips: a host of
/// 2 workers at 500 ms spent 8 s at one request in flight, its
/// reference's own noise of 14 answers holding the test at 2.4 standard
/// errors however many the window took.)
const BASE_PROBE_MORE: f64 = 3.0;
/// The share of the level the no-load latency is re-measured at. BBR's
/// ProbeRTT goes to half its window (`probe_rtt_cwnd_gain`), because its
/// window runs above the path's capacity by design; here the level sits at
/// the knee, found within a window's resolution, so a re-measure at two
/// thirds holds no queue of ours unless the level were half again above
/// the capacity, a queue (half the latency again) that every window at
/// the level would show. It costs a third of the throughput for its round
/// trips instead of half. (Judged on the simulator's seeds 1–15 and three
/// seeds of its wide grid against half and three quarters: at half, the
/// re-measures of hosts of a thousand workers cost 3.5 %; at three
/// quarters, a level one probe above a knee of 8 still queued during the
/// re-measure, and the reference it made held that queue.)
const BASE_GAIN: f64 = 2.0 / 3.0;
/// After a probe above the knee was clean, the level climbs one step a
/// window until this many times the knee it forgot, and doubles its steps
/// only beyond. A probe one above a knee `C` holds a queue of `1/C` of the
/// latency: at `C` above 50 that is under 2 %, about what one window of a
/// hundred answers at the 10 % spread of a steady host resolves at two
/// standard errors (`2 · 0.1 / √100`); the probe's clean windows do not
/// show that the host grew beyond that, so the level looks there a step at
/// a time, as near a knee.
const GROWN_MARGIN: f64 = 1.02;
/// Clean windows at the knee before a probe above it, at first, and at
/// most (after probes that all found the knee where it was): a probe costs
/// a window with one request queued, so they cost at most a quarter of a
/// request of mean queue, then a sixteenth, while a host that grows is
/// found within 16 windows. (A probe that finds a queue goes back to the
/// level it left, so the level stays at the knee and only a probe finds a
/// host that grew: at 32 windows, a host of 64 workers at 100 ms that grew
/// back to 256 waited 5.8 s for its first probe.)
const MIN_PROBE_EVERY: u32 = 4;
const MAX_PROBE_EVERY: u32 = 16;
/// A closed window waits at most this many times its slowest answer for
/// the rest (they may have been cancelled).
const CLOSE_WAIT: f64 = 2.0;
/// The no-load latency taken for a host that refused everything it was sent,
/// to space requests at a rate: the layer's least backoff, 50 ms.
const NO_SERVICE_BASE: f64 = 0.05;
/// Times closer than this (a nanosecond: below any timer's resolution)
/// are the same instant.
const SAME_INSTANT: f64 = 1e-9;
/// Halfway, in log latency, between no queue and a queue of one request
/// at window `w`'s count in flight `n` (one queued makes the latency `n /
/// (n − 1)` times the host's, by Little's law): above it, a queue of one
/// is the likelier of the two.
fn halfway_to_one(w: &Acc) -> f64 {
    let n = w.mean_in_flight().max(1.5);
    (n / (n - 1.0)).ln() / 2.0
}

/// The fewest answers a window is judged on.
const MIN_WINDOW: f64 = 4.0;
/// The fewest answers in the reference before a window may cut the level:
/// below, windows that show no queue add to the reference instead.
const MIN_REFERENCE: f64 = 8.0;
/// The kurtosis at which a variance's standard error is taken.
const SPREAD_KURTOSIS: f64 = 9.0;

/// The upper tail of the standard normal distribution, `P(Z > z)`
/// (Abramowitz and Stegun 7.1.26, within 1.5e-7).
/// A step of the CUSUM of overloads: the log-likelihood ratio of an answer
/// between an overload share of [`E_SEE`] and one of [`E_TOL`].
fn cusum_step(overload: bool) -> f64 {
    if overload {
        (E_SEE / E_TOL).ln()
    } else {
        ((1.0 - E_SEE) / (1.0 - E_TOL)).ln()
    }
}

fn normal_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

/// Mean and variance of `ln(latency)` (Welford), with the sums Little's law
/// needs: of latencies and of the requests in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Acc {
    n: f64,
    mean: f64,
    m2: f64,
    sum_latency: f64,
    sum_in_flight: f64,
}

impl Acc {
    fn push(&mut self, latency: f64, in_flight: f64) {
        let x = latency.ln();
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += d / self.n;
        self.m2 += d * (x - self.mean);
        self.sum_latency += latency;
        self.sum_in_flight += in_flight;
    }

    fn merge(&mut self, other: &Acc) {
        if other.n == 0.0 {
            return;
        }
        if self.n == 0.0 {
            *self = *other;
            return;
        }
        let n = self.n + other.n;
        let d = other.mean - self.mean;
        self.mean += d * other.n / n;
        self.m2 += other.m2 + d * d * self.n * other.n / n;
        self.n = n;
        self.sum_latency += other.sum_latency;
        self.sum_in_flight += other.sum_in_flight;
    }

    /// Forgets the oldest weight beyond `max` answers.
    fn cap(&mut self, max: f64) {
        if self.n > max {
            let k = max / self.n;
            self.n = max;
            self.m2 *= k;
            self.sum_latency *= k;
            self.sum_in_flight *= k;
        }
    }

    fn mean_latency(&self) -> f64 {
        self.sum_latency / self.n
    }

    /// The same answers, each `k` times as long.
    fn scale(&mut self, k: f64) {
        self.mean += k.ln();
        self.sum_latency *= k;
    }

    /// The sample variance of `ln(latency)`.
    fn variance(&self) -> f64 {
        self.m2 / (self.n - 1.0)
    }

    fn mean_in_flight(&self) -> f64 {
        self.sum_in_flight / self.n
    }
}

/// A comparison of window `a` with baseline `b`, in log space.
#[derive(Clone, Copy, Debug)]
struct Test {
    /// The difference of log means: `ln` of the ratio of geometric means.
    d: f64,
    /// Its standard error.
    se: f64,
    /// Degrees of freedom.
    df: f64,
}

impl Test {
    fn new(a: &Acc, b: &Acc) -> Option<Test> {
        let df = a.n + b.n - 2.0;
        if a.n < 1.0 || b.n < 1.0 || df < 1.0 {
            return None;
        }
        let sp = ((a.m2 + b.m2) / df).max(0.0).sqrt();
        let se = sp * (1.0 / a.n + 1.0 / b.n).sqrt();
        Some(Test {
            d: a.mean - b.mean,
            se,
            df,
        })
    }

    /// Student's quantile for `z` at `df` degrees of freedom (Cornish-Fisher,
    /// Abramowitz and Stegun 26.7.5): within 2 % from 4 degrees up.
    fn quantile(z: f64, df: f64) -> f64 {
        let (z3, z5) = (z * z * z, z * z * z * z * z);
        z + (z3 + z) / (4.0 * df) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
    }

    /// The difference is above `z` standard errors.
    fn above(&self, z: f64) -> bool {
        self.df >= 4.0 && self.d > Test::quantile(z, self.df) * self.se.max(1e-12)
    }

    /// The difference is below `−z` standard errors.
    fn below(&self, z: f64) -> bool {
        self.df >= 4.0 && self.d < -Test::quantile(z, self.df) * self.se.max(1e-12)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Growing from the first level until a queue shows.
    Startup,
    /// Near the knee: clean windows raise, queued ones cut.
    Cruise,
}

/// How a Startup window is taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ramp {
    /// From the level's start to the end of its first round trip.
    Round,
    /// Raised: waiting for the limit to fill (a round trip's window until
    /// it does).
    Filling,
    /// The requests sent from when the limit filled, enough of them to see
    /// the raise's overshoot, judged when all are back.
    Sized,
}

/// A cut under test: queue or drift?
#[derive(Clone, Copy, Debug)]
struct Verify {
    /// The window that made the cut.
    trigger: Acc,
    /// The level it was at, and the knee before the cut.
    level: f64,
    knee: f64,
    /// After a window at the cut level that looked like drift: that window,
    /// while one at half its level tells.
    deeper: Option<Acc>,
    /// `deeper` showed a slower host for sure (see
    /// [`Knee::slower_than_any_queue`]): the window at the same level adds
    /// to it, for the new reference.
    more: bool,
}

/// The send times of a window, to tell whether a rate was in use.
#[derive(Clone, Copy, Debug, Default)]
struct Sends {
    first: f64,
    last: f64,
    n: f64,
}

impl Sends {
    /// Adds the sends of a later window.
    fn merge(&mut self, later: &Sends) {
        if later.n == 0.0 {
            return;
        }
        if self.n == 0.0 {
            self.first = later.first;
        }
        self.last = later.last;
        self.n += later.n;
    }

    fn add(&mut self, sent: f64) {
        if self.n == 0.0 {
            self.first = sent;
        }
        self.last = sent;
        self.n += 1.0;
    }
}

/// A window that stopped taking requests at `at`, with `left` of its
/// requests still out; it is judged when they are back, or at `deadline`
/// (a request may be cancelled and never answer).
#[derive(Clone, Copy, Debug)]
struct Closed {
    at: f64,
    /// The slot's count of dispatches when it closed (0: not known).
    seq: u64,
    left: u64,
    deadline: f64,
}

/// The answers that came while a window waited for its last requests.
#[derive(Clone, Copy, Debug, Default)]
struct Next {
    window: Acc,
    max_in_flight: usize,
    sends: Sends,
    slowest: f64,
    counted: u64,
    refused: u64,
}

/// The answers to the requests in flight at an overload event.
#[derive(Clone, Copy, Debug)]
struct Batch {
    /// The level at the event.
    level: f64,
    ok: u32,
    refused: u32,
}

/// A run of answers beyond [`FAST_FACTOR`] that is long enough and whose
/// last instant is over (see [`Knee::fast_run`]).
#[derive(Clone, Copy, Debug, Default)]
struct Ripe {
    /// Slow answers: a queue, or a slower host.
    slow: bool,
    /// Quick answers: a quicker host.
    quick: bool,
    /// Slow answers beyond the cut under test (see [`Knee::beyond_cut`]).
    beyond_cut: bool,
}

/// Where an answer belongs, by when its request was sent.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Belongs {
    /// Sent before the window opened.
    Stale,
    Window,
    /// Sent after the window closed.
    Next,
}

/// An overload episode: from the first overload after the CUSUM's score
/// (without its resets at events) stood at zero, until it is back there.
#[derive(Clone, Debug)]
struct Episode {
    score: f64,
    /// The send time of its first overload.
    since: f64,
    /// Successes to requests sent since.
    served: u64,
    /// The send time of the latest of them (of the first overload, before
    /// any).
    last_served: f64,
}

#[derive(Clone, Debug)]
pub(crate) struct Knee {
    phase: Phase,
    /// The level `λ`: requests aimed at in flight (a rate below 1).
    level: f64,
    /// The last level whose window was clean, below the current one.
    clean: Option<f64>,
    /// When the level last changed: answers sent before are stale.
    level_since: f64,
    /// The dispatch number of the last request sent before the window
    /// opened, when the samples carry dispatch numbers (0: not known, and
    /// `level_since` tells the window's requests from stale ones).
    since_seq: u64,
    /// The slot's count of dispatches as of the answer being taken in (0:
    /// not known).
    dispatched: u64,
    /// The level changed: answers sent before the first answer sent at it
    /// comes back are a transient (a queue draining or building), and are
    /// skipped too.
    draining: bool,
    /// When the current round trip began.
    round_start: f64,
    last_at: f64,
    /// The no-load latency and noise.
    reference: Acc,
    /// The window: the answers to requests sent since `level_since`, with
    /// the most in flight, the send times and the slowest answer among
    /// them, and their count of any outcome.
    window: Acc,
    max_in_flight: usize,
    sends: Sends,
    slowest: f64,
    counted: u64,
    /// Overload answers to the window's requests (not in `window`).
    refused: u64,
    /// Requests still out that were sent before the window opened.
    old: u64,
    /// The window stopped taking requests, and waits for those still out.
    closed: Option<Closed>,
    /// Answers to requests sent after the window closed: the next window's
    /// if the level holds.
    after: Option<Box<Next>>,
    /// Requests in flight at the latest answer (itself included).
    in_flight: usize,
    /// Answers in a row above twice, or below half, the reference's typical
    /// latency, the latest of them, and the instant of the last.
    above: u32,
    below: u32,
    /// Answers in a row above twice the typical latency of the window that
    /// made the cut under test (when it is above the reference's), while
    /// one is: a queue that a cut drains only shrinks, so such answers,
    /// sent at the lower level, tell a capacity that fell since.
    beyond_cut: u32,
    run: Acc,
    run_at: f64,
    /// What Cruise keeps of the knee (boxed: a slot that never left
    /// Startup, as most in a broad crawl, has none).
    cruising: Option<Box<Cruising>>,
    /// Startup resumed after its exit proved noise (see
    /// [`Cruising::weak_trigger`]): its reference is a window sent one at
    /// a time, which rounds in doubt do not join.
    resumed_on_noise: bool,
    /// How Startup's window at this level is taken (see `startup_round`).
    ramp: Ramp,
    /// A window was opened afresh on a run of answers far from the
    /// reference: no other run counts until it is judged.
    remeasuring: bool,
    /// The reference holds Startup's answers: round trips cut short by the
    /// next level, which keep the quick answers of a heavy tail and miss
    /// the slow ones. The first full window below the knee replaces it.
    provisional: bool,
    /// Successes counted in two buckets of time, the current one (since
    /// `bucket_start`) and the one before (`prev` over `prev_len`): the
    /// rate the host served lately.
    bucket_start: f64,
    bucket: u64,
    prev: u64,
    prev_len: f64,
    /// The successes since the last pause ended (to requests sent after
    /// it; see [`Events::resumed`]).
    resumed_served: u64,
    /// The answers since the last overload event.
    answers_since_event: u64,
    /// What the overload events left (boxed: most slots are never refused).
    events: Option<Box<Events>>,
    /// The overload episode, while there is one (boxed: most slots are
    /// never refused).
    episode: Option<Box<Episode>>,
    /// Answers to requests sent at this level since it was set (or since
    /// the last event), and the overloads among them.
    run_answers: u64,
    run_errors: u64,
    /// At a rate (a level below 1), the no-load latency its levels are in,
    /// taken when the level went below 1 (NaN above).
    rate_unit: f64,
    delay: f64,
    limits: Limits,
}

/// The parameters a controller reads after it started.
#[derive(Clone, Copy, Debug)]
struct Limits {
    min_delay: f64,
    max_delay: f64,
    max_concurrency: usize,
}

/// The part of [`Knee`] that Cruise sets (and Startup, as it ends); until
/// then, [`NO_CRUISING`] stands for it.
#[derive(Clone, Debug)]
struct Cruising {
    /// The next raise in Cruise.
    step: f64,
    /// The estimated capacity, and the part of it noise cannot resolve.
    knee: f64,
    headroom: f64,
    /// Clean windows at the top, towards the next probe.
    at_top: u32,
    /// Clean windows at the top between two probes above it: doubled by
    /// every probe that finds a queue, reset by one that does not.
    probe_every: u32,
    /// The level is a probe above the knee.
    probing: bool,
    /// The probe's first window was clean; a second clean window at its
    /// level forgets the knee.
    probe_clean: bool,
    /// [`GROWN_MARGIN`] times the knee the last clean probe forgot (0
    /// before any): raises stay at one step below it.
    grown_from: f64,
    verify: Option<Box<Verify>>,
    /// A window that showed a queue, waiting for the next to confirm it.
    suspect: Option<Box<Acc>>,
    /// The level to come back to while the no-load latency is re-measured
    /// at [`BASE_GAIN`] of it, and when that is due next.
    base_probe: Option<f64>,
    base_due: f64,
    /// Startup ended on part of a window sent at the full level: the rest
    /// of its answers, still out, tell the knee better.
    exit: Option<Box<ExitWindow>>,
    /// The window that ended Startup on a small sample, until the first
    /// window after judges it again (and may find it spurious, and resume
    /// Startup).
    weak_trigger: Option<Acc>,
}

/// The answers to the requests sent at the level where Startup met a
/// queue (see [`Knee::exit_startup`]).
#[derive(Clone, Copy, Debug)]
struct ExitWindow {
    window: Acc,
    /// The requests sent from `from` until `to` belong to it.
    from: f64,
    to: f64,
    /// The level it was sent at (its answers after the exit come back
    /// with fewer in flight than they were sent with).
    level: f64,
    /// The level Startup left to.
    left_to: f64,
}

/// A controller's [`Cruising`] before Cruise.
static NO_CRUISING: Cruising = Cruising {
    step: 1.0,
    knee: f64::INFINITY,
    headroom: 0.0,
    at_top: 0,
    probe_every: MIN_PROBE_EVERY,
    probing: false,
    probe_clean: false,
    grown_from: 0.0,
    verify: None,
    suspect: None,
    base_probe: None,
    base_due: BASE_INTERVAL,
    exit: None,
    weak_trigger: None,
};

/// The part of [`Knee`] that only overload events set; until the first,
/// [`NO_EVENTS`] stands for it.
#[derive(Clone, Debug)]
struct Events {
    /// The CUSUM of overloads against [`E_TOL`], and the overloads and
    /// answers since it last stood at zero.
    cusum: f64,
    errors: u64,
    answers: u64,
    /// The last overload event (answers sent before it belong to it).
    last_event: f64,
    event_errors: u64,
    event_pause: f64,
    /// The level that failed, and the clean level below it.
    err_hi: f64,
    err_ceiling: f64,
    /// The batch of the last overload event, until an answer to a request
    /// sent after it comes.
    batch: Option<Batch>,
    /// When the last pause ended.
    resumed: f64,
    /// The level the slot resumed at: an episode tells the bucket only if
    /// it was sent at one level throughout (above the bucket's rate, as
    /// it ended refused; a rising level may have left tokens unused).
    resumed_level: f64,
    /// The shortest episode between a pause and the next one that passed
    /// anything: the requests it passed and how long it lasted, in seconds
    /// (infinite while there is none; see [`Knee::bucket_rate`]).
    short_episode: (f64, f64),
    /// At a rate: the last refusal's time and level, the successes since
    /// it, and those between it and the one before at the same level.
    refusals: Refusals,
    /// The overloads of all events so far, and all answers since the
    /// first overload: probes keep the one within [`E_BUDGET`] of the other.
    event_overloads: u64,
    answers_all: u64,
    /// Probes left that need not wait for the budget (see [`FREE_PROBES`]).
    free_probes: u8,
    /// The last free probe: the level it was raised from, and its own.
    /// Until the level moves, the first refusal at it is the probe's
    /// failure (a bucket of one token refuses the second request of a rate
    /// above its own): the level goes back at once, for one refusal where
    /// the CUSUM takes five.
    free_probe: Option<(f64, f64)>,
}

/// Successive refusals at one rate (see [`Knee::periodic`]).
#[derive(Clone, Copy, Debug)]
struct Refusals {
    at: f64,
    level: f64,
    ok: u64,
    before: Option<u64>,
    /// The runs of refusals at this level, while they look like a bucket
    /// of one token's; `None` once they do not.
    lone: Option<Lone>,
}

/// Refusals at one rate in runs of one length, each ended by a single
/// success: a bucket that holds one token, sent at a rate `r` between
/// `(k − 1)·R` and `k·R`, refuses `k − 1` in a row, then passes one, over
/// and over (a bucket that banks tokens passes two in a row now and then,
/// or varies its runs, unless the rate is `k·R` within a few per cent).
#[derive(Clone, Copy, Debug)]
struct Lone {
    /// The refusals in a row so far.
    run: u32,
    /// The length of the runs ended so far (0: none yet), and how many.
    period: u32,
    periods: u32,
}

/// A controller's [`Events`] before any overload event.
static NO_EVENTS: Events = Events {
    cusum: 0.0,
    errors: 0,
    answers: 0,
    last_event: f64::NEG_INFINITY,
    event_errors: 0,
    event_pause: 0.0,
    err_hi: f64::INFINITY,
    err_ceiling: f64::INFINITY,
    batch: None,
    resumed: f64::NEG_INFINITY,
    resumed_level: f64::NAN,
    short_episode: (0.0, f64::INFINITY),
    refusals: Refusals {
        at: f64::NAN,
        level: f64::NAN,
        ok: 0,
        before: None,
        lone: None,
    },
    event_overloads: 0,
    answers_all: 0,
    free_probes: 0,
    free_probe: None,
};

impl Knee {
    /// What Cruise keeps of the knee.
    fn cruising(&self) -> &Cruising {
        self.cruising.as_deref().unwrap_or(&NO_CRUISING)
    }

    /// What Cruise keeps of the knee, to change.
    fn cruising_mut(&mut self) -> &mut Cruising {
        self.cruising
            .get_or_insert_with(|| Box::new(NO_CRUISING.clone()))
    }

    /// What the overload events left.
    fn events(&self) -> &Events {
        self.events.as_deref().unwrap_or(&NO_EVENTS)
    }

    /// What the overload events left, to change.
    fn events_mut(&mut self) -> &mut Events {
        self.events
            .get_or_insert_with(|| Box::new(NO_EVENTS.clone()))
    }

    fn max_level(&self) -> f64 {
        self.limits.max_concurrency.max(1) as f64
    }

    fn limit(&self) -> usize {
        (self.level.round().max(1.0) as usize).min(self.limits.max_concurrency.max(1))
    }

    /// The limit the gate applies: the level, less one place for each
    /// overload since the CUSUM last stood at zero, once there are two and
    /// they are most of its answers. A refusal comes back at once and
    /// frees its place; sent again at once, it is refused again before the
    /// CUSUM can tell an overload from noise (at a millisecond, a level of
    /// 16 against a token bucket refused 27 requests in 2 ms, nginx's
    /// log). Held, the requests still out are the only ones refused until
    /// the event. A random error holds nothing (held for one answer, it
    /// cost the simulator's errors-0.5 three points on one seed of ten).
    fn gate_limit(&self) -> usize {
        let held = self
            .events
            .as_ref()
            .filter(|e| e.errors >= 2 && 2 * e.errors > e.answers)
            .map_or(0, |e| e.errors);
        let limit = self.limit();
        limit.saturating_sub(held as usize).max(1)
    }

    /// The smallest step of the level: one request, or an eighth below 8.
    fn min_step(&self) -> f64 {
        (self.level / 8.0).min(1.0)
    }

    /// The no-load latency (arithmetic mean), if known.
    fn base(&self) -> Option<f64> {
        (self.reference.n > 0.0).then(|| self.reference.mean_latency())
    }

    /// The latency that turns a rate into a level (a level `λ` below 1 is
    /// one request every `unit / λ`): at a rate, the no-load latency when
    /// the level went below 1, kept while it stays there; else the no-load
    /// latency. A rate limit's rate does not move when the latency is
    /// measured afresh: with the unit following the reference, the spacing
    /// would, and a slot kept just below a rate limit would be sent above
    /// it (or far below it) by a better measure of its latency.
    fn unit(&self) -> Option<f64> {
        self.kept_unit().or_else(|| self.base())
    }

    /// The rate unit in force: at a rate, once taken.
    fn kept_unit(&self) -> Option<f64> {
        (self.level < 1.0 && self.rate_unit > 0.0).then_some(self.rate_unit)
    }

    /// Takes the rate unit as the level goes below 1 to `level` (the
    /// no-load latency then), keeps it while it stays there, and drops it
    /// above.
    fn keep_unit(&mut self, level: f64) {
        if level >= 1.0 {
            self.rate_unit = f64::NAN;
        } else if self.kept_unit().is_none() {
            self.rate_unit = self.base().unwrap_or(f64::NAN);
        }
    }

    /// The lowest level: one request every `max_delay` (or one at a time,
    /// for a host slower than that).
    fn min_level(&self) -> f64 {
        self.unit()
            .map_or(0.0, |b| b / self.limits.max_delay.max(1e-9))
            .clamp(1e-6, 1.0)
    }

    /// Sets the level, starting a new window.
    fn set_level(&mut self, level: f64, at: f64) {
        let level = within(level, self.min_level(), self.max_level());
        self.keep_unit(level);
        if level != self.level {
            if let Some(cruising) = self.cruising.as_mut() {
                cruising.suspect = None;
            }
            // In Cruise the first round trip at a new level is a transient
            // (a queue drains, or builds): it is skipped. Startup judges it,
            // to leave at the first sign of a queue.
            self.draining = self.phase == Phase::Cruise || level.round() < self.level.round();
            self.level = level;
            self.run_answers = 0;
            self.run_errors = 0;
            self.open_window(at);
        } else {
            self.reset_window(at);
        }
        self.pace();
    }

    /// Opens a window on the requests sent from `at` on.
    fn open_window(&mut self, at: f64) {
        self.level_since = at;
        self.since_seq = self.dispatched;
        self.old = self.in_flight.saturating_sub(1) as u64;
        self.closed = None;
        self.after = None;
        self.clear_window();
    }

    fn clear_window(&mut self) {
        self.remeasuring = false;
        self.window = Acc::default();
        self.above = 0;
        self.below = 0;
        self.beyond_cut = 0;
        // The first round trip starts with the first answer sent at the
        // level (see `on_success`).
        self.round_start = f64::INFINITY;
        self.max_in_flight = 0;
        self.sends = Sends::default();
        self.slowest = 0.0;
        self.counted = 0;
        self.refused = 0;
    }

    /// A new window at the same level: a closed window's successor holds
    /// the answers that came while it waited.
    fn reset_window(&mut self, at: f64) {
        match self.closed.take() {
            Some(closed) => {
                self.clear_window();
                self.level_since = closed.at;
                self.since_seq = closed.seq;
                self.old = closed.left;
                self.take_after();
            }
            None => self.open_window(at),
        }
    }

    /// A closed window takes requests again: the answers that came while
    /// it waited (the quicker ones, sent after it closed) are its own, or
    /// it would read slow.
    fn reopen_window(&mut self) {
        self.closed = None;
        self.take_after();
    }

    /// Adds the answers that came while the window was closed to it (to an
    /// empty window, they are the whole of it).
    fn take_after(&mut self) {
        if let Some(next) = self.after.take() {
            self.window.merge(&next.window);
            self.max_in_flight = self.max_in_flight.max(next.max_in_flight);
            self.sends.merge(&next.sends);
            self.slowest = self.slowest.max(next.slowest);
            self.counted = self.counted.saturating_add(next.counted);
            self.refused = self.refused.saturating_add(next.refused);
        }
    }

    /// The window begins after the request the answer being taken in frees,
    /// which goes out now: with dispatch numbers, the next one; without,
    /// where the caller set `level_since`. The requests out, and that one,
    /// are old.
    fn begin_after_freed(&mut self) {
        if self.dispatched > 0 {
            self.since_seq = self.dispatched.saturating_add(1);
        }
        self.old = self.in_flight as u64;
    }

    /// Where an answer to a request sent at `sent` (its dispatch number
    /// `seq`, 0 if not known) belongs; counts it.
    ///
    /// Dispatch numbers decide where both sides have them: a send time
    /// taken as `at - latency` may come out a rounding error early, and
    /// requests sent at one instant (a paused clock, a timer's tick) may
    /// have gone out before or after a window opened or closed at it. An
    /// answer at that instant that freed a place for a request sent after
    /// the close, counted as one of the window's, would stand for one of
    /// its slow answers still out: the window, judged whole too soon,
    /// reads quick.
    fn belongs(&mut self, sent: f64, at: f64, seq: u64) -> Belongs {
        let by_seq = seq > 0 && self.since_seq > 0;
        let stale = if by_seq {
            seq <= self.since_seq
        } else {
            sent < self.level_since
        };
        if stale {
            // (Without dispatch numbers, an answer before the window began,
            // at the instant it opened, frees a place for a request that is
            // old too; with them, that request is the window's.)
            if by_seq || at >= self.level_since {
                self.old = self.old.saturating_sub(1);
            }
            return Belongs::Stale;
        }
        let after_close = |closed: &Closed| {
            if seq > 0 && closed.seq > 0 {
                seq > closed.seq
            } else {
                sent >= closed.at
            }
        };
        match &mut self.closed {
            Some(closed) if after_close(closed) => {
                let next = self.after.get_or_insert_with(Box::default);
                next.counted = next.counted.saturating_add(1);
                Belongs::Next
            }
            Some(closed) => {
                closed.left = closed.left.saturating_sub(1);
                self.counted = self.counted.saturating_add(1);
                Belongs::Window
            }
            None => {
                self.counted = self.counted.saturating_add(1);
                Belongs::Window
            }
        }
    }

    /// Whether the window is whole, with `want` requests at least: once
    /// that many were sent in it, it closes, and it is whole when all of
    /// them are back. Judging it on the answers that came first would
    /// leave out the slow ones.
    fn complete(&mut self, want: f64, at: f64) -> bool {
        if let Some(closed) = self.closed.as_mut() {
            // Requests cancelled without an answer leave the count in flight.
            closed.left = closed.left.min(self.in_flight.saturating_sub(1) as u64);
            let closed = *closed;
            let done = closed.left == 0 || at >= closed.deadline;
            return done;
        }
        let out = (self.in_flight.saturating_sub(1) as u64).saturating_sub(self.old);
        if (self.counted.saturating_add(out) as f64) < want {
            return false;
        }
        if out == 0 {
            return true;
        }
        let wait = CLOSE_WAIT * self.slowest.max(self.reference.mean_latency());
        self.closed = Some(Closed {
            at,
            seq: self.dispatched,
            left: out,
            deadline: at + wait,
        });
        false
    }

    fn pace(&mut self) {
        let known = self.unit().or_else(|| {
            self.events()
                .last_event
                .is_finite()
                .then_some(NO_SERVICE_BASE)
        });
        let Some(unit) = known else {
            return;
        };
        let delay = if self.level >= 1.0 {
            let pacing = unit / (G_PACE * self.level);
            if pacing < TIMER_RESOLUTION {
                0.0
            } else {
                pacing
            }
        } else {
            unit / self.level
        };
        self.delay = within(delay, self.limits.min_delay, self.limits.max_delay);
    }

    /// Whether the window's requests were refused more often than noise
    /// of [`E_TOL`] explains (one standard error above it): errors that
    /// came with this level, so it may not rise.
    fn refusing(&self) -> bool {
        let n = self.window.n + self.refused as f64;
        self.refused > 0 && self.refused as f64 > E_TOL * n + Z_UP * (E_TOL * n).sqrt()
    }

    /// Whether the window's limit (or rate) was in use.
    fn bound(&self) -> bool {
        if self.level >= 1.0 {
            return self.max_in_flight >= self.limit();
        }
        let s = &self.sends;
        s.n >= 2.0 && (s.last - s.first) / (s.n - 1.0) <= 1.25 * self.delay.max(1e-9)
    }

    /// Little's estimate of the capacity from window `w`, and the queue a
    /// test of `w` against the reference cannot resolve at this level.
    fn capacity(&self, w: &Acc, test: &Test) -> (f64, f64) {
        self.capacity_at(w, test, self.level)
    }

    /// [`capacity`](Self::capacity), for a window sent at `level`.
    fn capacity_at(&self, w: &Acc, test: &Test, level: f64) -> (f64, f64) {
        let c = w.mean_in_flight() * self.reference.mean_latency() / w.mean_latency();
        let unresolved = level * ((Z_CUT * test.se).exp() - 1.0);
        (c, (unresolved.ceil() - 1.0).max(0.0))
    }

    /// The spread of `ln(latency)` at no load.
    fn sigma(&self) -> f64 {
        let r = &self.reference;
        if r.n < 2.0 {
            return 0.0;
        }
        r.variance().max(0.0).sqrt()
    }

    /// Answers in a row beyond [`FAST_FACTOR`] that noise alone makes less
    /// than once in `1 / FAST_ODDS` round trips (the level's answers each),
    /// at the reference's spread (at least [`FAST_RUN`]). The run is found
    /// at once at any level: a thousand in flight answer a run of 13 within
    /// a hundredth of a round trip.
    fn fast_run(&self) -> u32 {
        let sigma = self.sigma();
        if sigma <= 0.0 {
            return FAST_RUN;
        }
        let p = normal_tail(FAST_FACTOR.ln() / sigma);
        if p <= 0.0 {
            return FAST_RUN;
        }
        let k = ((FAST_ODDS / self.level.max(1.0)).ln() / p.ln()).ceil();
        if k.is_finite() {
            (k as u32).clamp(FAST_RUN, 64)
        } else {
            FAST_RUN
        }
    }

    /// The answers each of two windows needs to tell apart latencies
    /// `effect` apart in log, at two standard errors with 84 % power, at
    /// the reference's spread (at most [`MAX_ROUNDS_PER_WINDOW`] round
    /// trips).
    fn to_tell(&self, effect: f64) -> f64 {
        let z = (Z_CUT + Z_POW) * self.sigma() / effect;
        let most = self.level.round().max(4.0) * MAX_ROUNDS_PER_WINDOW;
        (2.0 * z * z).min(most)
    }

    /// The answers a window needs before it may raise the level: enough to
    /// see a queue of [`Q_SEE`] at two standard errors with 84 % power.
    fn needed(&self, test: &Test) -> f64 {
        let one_round = self.level.round().max(4.0);
        let most = one_round * MAX_ROUNDS_PER_WINDOW;
        let sp = if test.df > 0.0 {
            test.se / (1.0 / self.window.n.max(1.0) + 1.0 / self.reference.n).sqrt()
        } else {
            return most;
        };
        let target = (1.0 + Q_SEE / self.level.max(1.0)).ln() / (Z_CUT + Z_POW);
        let room = (target / sp.max(1e-12)).powi(2) - 1.0 / self.reference.n;
        if room <= 0.0 {
            return most;
        }
        (1.0 / room).clamp(one_round, most)
    }

    /// Adds an answer to the CUSUM of overloads (Page's test of a
    /// Bernoulli share: [`E_TOL`] against [`E_SEE`]).
    fn count(&mut self, overload: bool) {
        if !overload && self.events.is_none() {
            // The score stands at zero before the first overload, and a
            // success leaves it there (its step is negative).
            return;
        }
        let events = self.events_mut();
        events.cusum += cusum_step(overload);
        if events.cusum <= 0.0 {
            events.cusum = 0.0;
            events.errors = 0;
            events.answers = 0;
        } else {
            events.errors += u64::from(overload);
            events.answers = events.answers.saturating_add(1);
        }
    }

    /// Counts an answer (sent at `sent`) in the overload episode: it starts
    /// at the first overload after the score stood at zero, and ends when
    /// the score is back at zero.
    fn episode(&mut self, overload: bool, sent: f64) {
        if overload {
            let episode = self.episode.get_or_insert_with(|| {
                Box::new(Episode {
                    score: 0.0,
                    since: sent,
                    served: 0,
                    last_served: sent,
                })
            });
            episode.score += cusum_step(true);
        } else if let Some(episode) = self.episode.as_mut() {
            episode.score += cusum_step(false);
            if episode.score <= 0.0 {
                self.episode = None;
            } else if sent >= episode.since {
                episode.served = episode.served.saturating_add(1);
                episode.last_served = episode.last_served.max(sent);
            }
        }
    }

    /// The level the host served since the episode's first overload: the
    /// posterior mean of a Poisson rate after `k` successes in `t`
    /// seconds, `(k + 1) / t`, at the rate unit. Once a token bucket
    /// refuses, it passes its rate `R` and no more (its burst is spent);
    /// a server that refuses beyond `N` places passes `N / d` (its places
    /// are full): either way the rate since the first refusal, not the one
    /// before, whatever burst the start of the episode got.
    fn episode_level(&self, at: f64) -> Option<f64> {
        let episode = self.episode.as_ref()?;
        // (The requests still out are counted as served: a refusal comes
        // back at once, a success may wait behind a queue.)
        let k = episode.served as f64 + self.in_flight.saturating_sub(1) as f64;
        self.poisson_level(k, episode.since, at)
    }

    /// The level of the rate since the episode's last success (its first
    /// overload, before any), for a refusal with nothing served since:
    /// `1 / t`, the posterior mean of a Poisson rate after no event in `t`
    /// seconds (a flat prior, as in [`episode_level`](Self::episode_level)).
    /// Each refusal sent a spacing after the last halves it (`t` doubles),
    /// where the rate since the first refusal falls by only about a third
    /// after one success (`2 / t`, with `t` up by half).
    fn unserved_level(&self, at: f64) -> Option<f64> {
        self.poisson_level(0.0, self.episode.as_ref()?.last_served, at)
    }

    /// The posterior mean of a Poisson rate after `k` events from `since`
    /// to `at`, `(k + 1) / t` (a flat prior), at the rate unit; `None`
    /// over no time, or without a unit.
    fn poisson_level(&self, k: f64, since: f64, at: f64) -> Option<f64> {
        let t = at - since;
        if t.is_nan() || t <= 0.0 {
            return None;
        }
        Some((k + 1.0) / t * self.unit()?)
    }

    /// Counts a success at `at` in the buckets.
    fn bucket_len(&self) -> f64 {
        let base = self.base().unwrap_or(0.0);
        let unit = self.unit().unwrap_or(0.0);
        (BUCKET_ROUNDS * base).max(BUCKET_SENDS * unit / self.level)
    }

    fn served(&mut self, at: f64) {
        let len = self.bucket_len();
        if at - self.bucket_start >= len {
            self.prev = self.bucket;
            self.prev_len = at - self.bucket_start;
            self.bucket = 0;
            self.bucket_start = at;
        }
        self.bucket = self.bucket.saturating_add(1);
    }

    /// The level served lately: the successes per second of the two
    /// buckets at the no-load latency (Little's law), and that less one
    /// standard error of their count.
    fn served_level(&self, at: f64) -> Option<(f64, f64)> {
        let n = self.prev + self.bucket;
        let span = self.prev_len + (at - self.bucket_start);
        if n < MIN_DELIVERED || span.is_nan() || span <= 0.0 {
            return None;
        }
        let n = n as f64;
        let level = n / span * self.unit()?;
        (level > 0.0).then_some((level, level * (1.0 - 1.0 / n.sqrt())))
    }

    /// At a rate (a level below 1, where the delay spaces every request),
    /// the level the host served of the requests sent at it: the level
    /// times the share of their answers that were not refused. `None`
    /// above a rate (a refused request frees its place at once, so answers
    /// over-count refusals there), below [`MIN_SHARE_RUN`] answers, or
    /// when none was served.
    fn served_share(&self, any_level: bool) -> Option<f64> {
        let n = self.run_answers as f64;
        let ok = n - self.run_errors as f64;
        if (self.level >= 1.0 && !any_level) || n < MIN_SHARE_RUN || ok <= 0.0 {
            return None;
        }
        Some(self.level * ok / n)
    }

    /// At a rate, an event without a pause that ends a run refused whole
    /// (every answer to the requests sent at the level since the last
    /// event, at least [`MIN_SHARE_RUN`]): the host served none of `n`, so
    /// its share is estimated by Laplace's rule of succession, `1 / (n +
    /// 2)`, and bounded above by the rule of three, `3 / n` (the 95 %
    /// bound of a share of which none of `n` was seen), or β if lower.
    /// Returns the level times each. `None` above a rate: there a refused
    /// request frees its place at once, so refusals outrun the successes
    /// still being served, and a run refused whole says little (a server
    /// that refuses beyond its workers, as nginx's `limit_conn` does,
    /// would be cut far below them).
    fn refused_whole(&self, pause: f64) -> Option<(f64, f64)> {
        let n = self.run_answers as f64;
        if pause > 0.0
            || self.level >= 1.0
            || n < MIN_SHARE_RUN
            || self.run_errors < self.run_answers
        {
            return None;
        }
        Some((self.level / (n + 2.0), self.level * (3.0 / n).min(BETA)))
    }

    fn on_success(&mut self, latency: f64, in_flight: usize, at: f64, sent: f64, belongs: Belongs) {
        if sent >= self.events().last_event {
            self.count(false);
            if let Some(events) = self.events.as_mut() {
                events.batch = None;
            }
        } else {
            self.batch(true);
        }
        self.served(at);
        if let Some(events) = self.events.as_mut() {
            events.refusals.ok = events.refusals.ok.saturating_add(1);
        }
        if sent >= self.events().resumed {
            self.resumed_served = self.resumed_served.saturating_add(1);
        }
        let first = self.reference.n == 0.0;
        if self.cruising.as_ref().is_some_and(|c| c.exit.is_some()) {
            self.exit_answer(latency, sent, at);
        }
        if self.phase == Phase::Startup
            && self.ramp == Ramp::Filling
            && self.in_flight >= self.limit()
        {
            // The limit just filled at the raised level: the window holds
            // the requests sent from now on, each of them sent with the
            // level in flight (one sent while it filled can pass ahead of
            // the queue the level makes, and not see it).
            self.ramp = Ramp::Sized;
            self.open_window(at);
            // The request this answer frees goes out now, and belongs to
            // the level that filled: the window begins just after it (a
            // send time taken as the answer's time less its latency may
            // come out a rounding error early or late).
            self.level_since = at + SAME_INSTANT;
            self.begin_after_freed();
            return;
        }
        if belongs == Belongs::Stale && !first {
            if self.phase == Phase::Startup && self.ramp == Ramp::Sized && self.closed.is_none() {
                // The window closes once it sent enough, before its own
                // answers come back.
                let want = self.startup_want();
                self.complete(want, at);
            }
            return;
        }
        if self.draining {
            // The first answer sent at the lower level: what was sent before
            // it returns waited behind the old queue.
            self.draining = false;
            self.open_window(at);
            return;
        }
        let n = in_flight.max(1) as f64;
        if first {
            // The first answer was served before anything of ours could
            // queue ahead of it.
            self.reference.push(latency, n);
            self.pace();
            return;
        }
        self.answers_since_event = self.answers_since_event.saturating_add(1);
        if let Some(events) = self.events.as_mut() {
            events.answers_all = events.answers_all.saturating_add(1);
        }
        if belongs == Belongs::Next {
            let next = self.after.get_or_insert_with(Box::default);
            next.window.push(latency, n);
            next.max_in_flight = next.max_in_flight.max(in_flight);
            next.sends.add(sent);
            next.slowest = next.slowest.max(latency);
        } else {
            self.window.push(latency, n);
            self.max_in_flight = self.max_in_flight.max(in_flight);
            self.sends.add(sent);
            self.slowest = self.slowest.max(latency);
        }
        // A run is judged once its last instant is over. Answers that come
        // at one instant (one tick of a timer, one batch of responses read
        // together) come in no order a run can rely on: a batch may hand
        // over its slowest answers first, and a quick answer later in the
        // same batch breaks the run.
        let ripe = if self.phase == Phase::Cruise && at > self.run_at {
            let k = self.fast_run();
            Ripe {
                slow: self.above >= k,
                quick: self.below >= k,
                beyond_cut: self.beyond_cut >= k,
            }
        } else {
            Ripe::default()
        };
        let typical = self.reference.mean.exp();
        let cut_typical = self
            .cruising
            .as_ref()
            .and_then(|c| c.verify.as_deref())
            .filter(|v| v.trigger.n > 0.0)
            .map(|v| v.trigger.mean.max(self.reference.mean).exp());
        if cut_typical.is_some_and(|t| latency > FAST_FACTOR * t) {
            self.beyond_cut = self.beyond_cut.saturating_add(1);
        } else {
            self.beyond_cut = 0;
        }
        if latency > FAST_FACTOR * typical {
            if self.above == 0 {
                self.run = Acc::default();
            }
            self.above = self.above.saturating_add(1);
            self.below = 0;
            self.run.push(latency, n);
            self.run_at = at;
        } else if latency < typical / FAST_FACTOR {
            if self.below == 0 {
                self.run = Acc::default();
            }
            self.below = self.below.saturating_add(1);
            self.above = 0;
            self.run.push(latency, n);
            self.run_at = at;
        } else {
            self.above = 0;
            self.below = 0;
        }
        if self.round_start == f64::INFINITY {
            // The first answer at this level: its round trip starts now, and
            // ends when an answer sent after it comes back.
            self.round_start = at;
        }
        let round_over = sent >= self.round_start;
        let since = self.level_since;
        match self.phase {
            Phase::Startup => self.startup_round(at, round_over),
            Phase::Cruise => self.cruise(at, ripe),
        }
        // A new round trip, unless a new level (or window) began one.
        if round_over && self.level_since == since && self.round_start != f64::INFINITY {
            self.round_start = at;
        }
    }

    /// At the end of a round trip in Startup: raise, or leave at a queue.
    /// After each answer in Startup, and at the end of its round trip:
    /// leave at a queue, or raise at the end of a clean round.
    fn startup_round(&mut self, at: f64, round_over: bool) {
        // A window sent at the full level is whole once enough were sent
        // to see the raise's overshoot and all of them are back; one that
        // never filled its limit, at the end of each round trip.
        let sized = self.ramp == Ramp::Sized;
        let whole = if sized {
            let want = self.startup_want();
            self.complete(want, at)
        } else {
            round_over
        };
        if self.window.n < MIN_WINDOW {
            if whole && sized {
                // Too few answers to judge (the first is the reference, an
                // overload has no latency): a fresh window.
                self.open_window(at);
            }
            // Too few answers yet: another round trip at this level.
            return;
        }
        let Some(test) = Test::new(&self.window, &self.reference) else {
            return;
        };
        let (c, headroom) = self.capacity(&self.window, &test);
        let queue = self.window.mean_in_flight() - c;
        if !whole {
            // Within the round, only a queue beyond doubt: tested after
            // every answer, five standard errors keep false exits below
            // one in a million answers.
            if test.above(Z_SURE) && queue >= Q_MIN {
                self.exit_startup(c, headroom, &test, at, true);
            }
            return;
        }
        if self.saturated(&self.window, &test) {
            self.exit_startup(c, headroom, &test, at, false);
            return;
        }
        // A window opened when the limit was full was sent at the level.
        if (sized || self.bound()) && !self.refusing() {
            let doubt = self.resumed_on_noise && test.d >= halfway_to_one(&self.window);
            if !doubt {
                self.clean = Some(self.level);
                // A clean level is the host's no-load latency too.
                let window = self.window;
                self.reference.merge(&window);
                self.reference.cap(REFERENCE_MAX);
            }
            let grow = if sized {
                // By a quarter, as after a round: a sized window's
                // overshoot lasts one round trip where a round's lasts two.
                self.level / 4.0
            } else {
                self.level.min(Q_RAMP.max(self.level / 4.0))
            };
            let before = self.level;
            self.set_level(self.level + grow, at);
            if self.level != before && self.dispatched > 0 {
                // The request this answer frees goes out at once, with the
                // level before the raise in flight (the raise's requests
                // follow it): it does not see the queue the raise makes,
                // and the window begins after it, as at a sized window's
                // fill. (Counted in, on a host of 2 workers at 500 ms its
                // quick answer kept a window of five at 4 in flight below
                // three standard errors, and the level went on to 8.)
                // Without dispatch numbers, the window holds the requests
                // sent from the answer's instant on.
                self.begin_after_freed();
            }
            // Its window opens when the limit is full, if fewer than a round
            // trip of requests tell.
            self.ramp = if self.sized_ramp() {
                Ramp::Filling
            } else {
                Ramp::Round
            };
        } else if sized {
            // Refused: a fresh window at this level.
            self.open_window(at);
        }
        // Else not in use: keep gathering answers at this level.
    }

    /// Whether Startup's window at this (raised) level is sized: above the
    /// additive steps, when fewer than a round trip of requests tell, and
    /// when the reference is taken to be fair to a window that waits for
    /// all its answers. Startup's rounds end at the first answer sent
    /// after they began, and leave out the slowest answers of their last
    /// part, about a share `σ` of them, each about `σ` slow: a bias of
    /// `σ²` towards quick answers. A sized window's standard error is
    /// `ln(λ / clean) / ((Z_EXIT + Z_POW) √2)` by its size: the bias must
    /// be below half of it (`σ` below 0.14 at a raise by a quarter).
    fn sized_ramp(&self) -> bool {
        let Some(clean) = self.clean.filter(|c| *c < self.level) else {
            return false;
        };
        let se = (self.level / clean).ln() / ((Z_EXIT + Z_POW) * std::f64::consts::SQRT_2);
        self.level > 4.0 * Q_RAMP
            && self.sigma().powi(2) <= se / 2.0
            && self.startup_want() < self.level.round()
    }

    /// The requests a Startup window sends at a raised level: enough to
    /// see the queue the raise would make at a knee just above the last
    /// clean level (latencies `level / clean` apart) at three standard
    /// errors with 84 % power, at the reference's spread; at least
    /// [`MIN_WINDOW`] and at most one round trip of the level.
    fn startup_want(&self) -> f64 {
        let round = self.level.round().max(MIN_WINDOW);
        let Some(clean) = self.clean.filter(|c| *c < self.level) else {
            return round;
        };
        let z = (Z_EXIT + Z_POW) * self.sigma() / (self.level / clean).ln();
        (2.0 * z * z).max(2.0 * MIN_WINDOW).min(round)
    }

    /// Whether Startup's window `w` met a queue: three standard errors and
    /// half a request; with too few answers for a t-test, the likelier of
    /// no queue and one queued request.
    fn saturated(&self, w: &Acc, test: &Test) -> bool {
        let (c, _) = self.capacity(w, test);
        let queue = w.mean_in_flight() - c;
        if test.df >= 4.0 {
            test.above(Z_EXIT) && queue >= Q_MIN
        } else {
            test.d >= halfway_to_one(w) && queue >= Q_MIN
        }
    }

    /// After an exit on few answers: whether `trigger`, the window that
    /// ended Startup, still shows a queue, judged against the reference as
    /// it is now (at the exit, a reference of one or two answers may have
    /// been quick by chance, and a host with heavy tails then left Startup
    /// at one request in flight), by the rule that ended Startup on few
    /// answers, the likelier of no queue and a queue of one, and beyond
    /// the noise: nearer a queue of one by a standard error at least
    /// ([`Z_UP`], the margin a raise needs the other way). A trigger of
    /// four answers keeps its own noise however long the reference grows,
    /// so within that margin nothing more will tell, and the two errors
    /// cost unlike amounts: Startup tested again at the trigger's level
    /// costs a host of one worker a window with one request queued before
    /// it leaves again, against a reference that now holds its tails; an
    /// exit that stands on noise left a host of 8 workers with Pareto
    /// tails at one request in flight for 8 s, and at a fifth of its
    /// speed for 20 (the simulator's heavy-tail, seed 4: 0.62 of the
    /// oracle). Against a reference of fewer than [`MIN_REFERENCE`]
    /// answers, the rule alone, as at the exit: a window sent one at a
    /// time that differs from such a reference replaces it, and Startup
    /// resumes against that (see *Reference* in [`Adaptive`]'s
    /// documentation).
    fn exit_stands(&self, trigger: &Acc) -> bool {
        let weak = self.reference.n < MIN_REFERENCE;
        Test::new(trigger, &self.reference).is_none_or(|t| {
            let margin = if weak { 0.0 } else { Z_UP * t.se };
            t.d >= halfway_to_one(trigger) + margin
        })
    }

    /// Startup met a queue: on to Cruise at the estimated knee.
    fn exit_startup(&mut self, c: f64, headroom: f64, test: &Test, at: f64, early: bool) {
        self.resumed_on_noise = false;
        let trigger = (test.df < 8.0).then_some(self.window);
        self.cruising_mut().weak_trigger = trigger;
        self.cruising_mut().knee = c;
        self.cruising_mut().headroom = headroom;
        let before = self.clean.unwrap_or(1.0);
        // Within the round, the answers so far were sent while the queue
        // was building, and `Ĉ` is too high: back to the last clean level,
        // and up from there as Cruise finds the knee.
        let level = if early {
            before
        } else {
            (c - headroom).max(before)
        };
        self.phase = Phase::Cruise;
        self.cruising_mut().base_due = at + BASE_INTERVAL;
        self.cruising_mut().step = self.min_step();
        let sized = self.ramp == Ramp::Sized;
        self.ramp = Ramp::Round;
        if sized {
            // The window's requests, and those sent after it closed, were
            // all sent with the level in flight, and each answer tells the
            // knee by Little's law: those still out are taken in as they
            // come back.
            let mut window = self.window;
            if let Some(next) = self.after.as_deref() {
                window.merge(&next.window);
            }
            let exit = ExitWindow {
                window,
                from: self.level_since,
                to: at,
                level: self.limit() as f64,
                left_to: level.min(self.level),
            };
            self.cruising_mut().exit = Some(Box::new(exit));
        }
        self.set_level(level.min(self.level), at);
    }

    /// An answer after Startup ended on part of a window: it joins that
    /// window if sent at its level; the first sent after it ends the
    /// window, which then sets the knee (and the level, if Cruise has not
    /// moved it) as a whole window would have.
    fn exit_answer(&mut self, latency: f64, sent: f64, at: f64) {
        let Some(mut exit) = self.cruising().exit.as_deref().copied() else {
            return;
        };
        if sent < exit.from {
            return;
        }
        if sent < exit.to {
            exit.window.push(latency, exit.level);
            if let Some(kept) = self.cruising_mut().exit.as_deref_mut() {
                *kept = exit;
            }
            return;
        }
        self.cruising_mut().exit = None;
        let Some(test) = Test::new(&exit.window, &self.reference) else {
            return;
        };
        let (c, headroom) = self.capacity_at(&exit.window, &test, exit.level);
        let cruising = self.cruising_mut();
        if cruising.verify.is_some() || cruising.base_probe.is_some() {
            return;
        }
        cruising.knee = c;
        cruising.headroom = headroom;
        if self.level == exit.left_to && c - headroom > self.level && c - headroom < exit.level {
            self.set_level(c - headroom, at);
        }
    }

    /// After each answer in Cruise: fast checks on the latest answers, then the
    /// window's.
    fn cruise(&mut self, at: f64, ripe: Ripe) {
        let testing = self.cruising().verify.is_some()
            || self.cruising().base_probe.is_some()
            || self.remeasuring;
        if ripe.slow && !testing && self.run.mean_in_flight() <= 1.0 {
            // One at a time, the host itself got slower.
            self.remeasure(at);
            return;
        }
        let verifying = self.cruising().verify.is_some()
            && self.cruising().base_probe.is_none()
            && !self.remeasuring;
        if ripe.slow && ripe.beyond_cut && verifying {
            // A cut under test, and a run of answers sent at its level
            // beyond twice the latency of the window that made it: the
            // queue it cut only drains, and the window under test, a round
            // trip at the inflated latency away, would come too late (a
            // host of 256 workers at 100 ms that fell to 64 while a probe's
            // cut of 2 was under test held a queue of 189 for 1.2 s). Cut
            // on the run, as outside a test, unless no queue of ours
            // explains it: then the host got slower, which the test under
            // way tells.
            let run = self.run;
            if let Some(t) = Test::new(&run, &self.reference) {
                if run.mean_in_flight() > 1.0 && !self.slower_than_any_queue(&run, &t) {
                    self.cruising_mut().verify = None;
                    self.cut(&run, &t, at);
                    return;
                }
            }
        }
        if ripe.slow && !testing {
            let run = self.run;
            if let Some(t) = Test::new(&run, &self.reference) {
                if self.slower_than_any_queue(&run, &t) {
                    // No queue of ours explains these latencies: the host
                    // got slower, unless a whole window at this level says
                    // otherwise (the run is chosen by its latency).
                    self.remeasure(at);
                } else {
                    self.cut(&run, &t, at);
                }
                return;
            }
        }
        if ripe.quick && !testing {
            self.remeasure(at);
            return;
        }
        let Some(test) = Test::new(&self.window, &self.reference) else {
            return;
        };
        if let Some(level) = self.cruising().base_probe {
            // The re-measure's round trips at its level, in answers.
            let rounds = BASE_PROBE_ROUNDS * self.limit() as f64;
            if !self.complete(rounds.max(2.0 * MIN_WINDOW), at) {
                return;
            }
            let Some(test) = Test::new(&self.window, &self.reference) else {
                return;
            };
            // The window at two thirds of the level is the no-load
            // latency: if the reference is above it, it held a queue (or
            // the host got faster); else it takes the window in.
            if test.above(Z_CUT) {
                // (Whatever half of this finds, the next re-measure waits
                // its interval: before, when it found no slower host, the
                // level came back with a re-measure already due, and fell
                // again at once.)
                self.cruising_mut().base_probe = None;
                self.remeasure_later(at);
                if self.slower_than_any_queue(&self.window, &test) {
                    let knee = self.cruising().knee;
                    self.slower(level, knee, at);
                    return;
                }
                // Above it: the host got slower, or its capacity fell below
                // two thirds of the level. Half of that again tells which.
                self.cruising_mut().verify = Some(Box::new(Verify {
                    trigger: self.window,
                    level,
                    knee: self.cruising().knee,
                    deeper: Some(self.window),
                    more: false,
                }));
                self.set_level(self.level / 2.0, at);
                return;
            }
            let more = if test.below(Z_REBASE) {
                // Quicker beyond doubt, on fewer answers than replacing
                // the reference takes (two round trips below a level of
                // 8): the window goes on until it holds them.
                self.window.n < 2.0 * MIN_REFERENCE
            } else if test.below(Z_CUT) {
                // Too far below to take in, too near to replace it: more
                // answers at two thirds of the level tell which.
                self.window.n < BASE_PROBE_MORE * rounds
            } else {
                false
            };
            if more {
                self.reopen_window();
                return;
            }
            if test.below(Z_REBASE) {
                self.rebase(self.window, at);
            } else if !test.below(Z_CUT) {
                let window = self.window;
                self.reference.merge(&window);
                self.reference.cap(REFERENCE_MAX);
            }
            self.cruising_mut().base_probe = None;
            self.remeasure_later(at);
            self.set_level(level, at);
            return;
        }
        if let Some(v) = self.cruising().verify.as_deref().copied() {
            self.verify(v, at);
            return;
        }
        // (Not while a run of answers far from the reference is under way:
        // the host may have changed, which a window at the level tells
        // without halving it, and a window at half would be judged against
        // a reference of before.)
        if at >= self.cruising().base_due && self.level > 2.0 && self.above == 0 && self.below == 0
        {
            self.cruising_mut().base_probe = Some(self.level);
            self.set_level(self.level * BASE_GAIN, at);
            return;
        }
        // One test per window, once it holds enough answers to see a queue
        // of two: a false cut is then one window in 44. (Not against
        // Startup's reference, which misses slow answers by an amount its
        // rounds do not tell, on a window that misses its own: the whole
        // window replaces that reference, or is judged against it. With a
        // thousand workers at 100 ms, log-normal σ 0.8, such a reference
        // was 0.027 s where the host's geometric mean is 0.073: 117
        // answers that came first, 0.037, cut the level at once, and the
        // reference kept its bias.)
        if self.closed.is_none()
            && !self.provisional
            && self.max_in_flight > 1
            && self.window.n >= 2.0 * MIN_WINDOW
            && self.reference.n >= MIN_REFERENCE
            && test.above(Z_SURE)
        {
            // A queue beyond doubt before the window is whole (its slowest
            // answers, still out, would only add to it).
            let (c, _) = self.capacity(&self.window, &test);
            if self.window.mean_in_flight() - c >= Q_MIN
                && !self.wider_than_any_queue(&self.window, &test)
                && !self.slower_than_any_queue(&self.window, &test)
            {
                let window = self.window;
                self.cut(&window, &test, at);
                return;
            }
        }
        let mut want = self.needed(&test).max(2.0 * MIN_WINDOW);
        if self.provisional {
            // The window that replaces Startup's reference holds as many
            // answers.
            want = want.max(self.reference.n);
            if self.cruising().weak_trigger.is_some() && self.reference.n < MIN_REFERENCE {
                // After an exit against a reference of a few answers, the
                // window that tells whether it was noise (see
                // `exit_stands`) need not wait for a full window's.
                want = 2.0 * MIN_WINDOW;
            }
        }
        if self.remeasuring {
            // Enough to replace the reference.
            want = want.max(2.0 * MIN_REFERENCE);
        }
        if !self.complete(want, at) {
            return;
        }
        let Some(test) = Test::new(&self.window, &self.reference) else {
            return;
        };
        let weak = self.reference.n < MIN_REFERENCE;
        if weak && (self.max_in_flight > 1 || self.level < 1.0) {
            // Too little known of the no-load latency to judge a queue: a
            // window that shows none adds to it. (At a limit of one, there
            // is no queue of ours to judge: see below. At a rate, the
            // level came from overload events, and a raise there is a
            // probe.)
            if !test.above(Z_CUT) {
                let window = self.window;
                self.reference.merge(&window);
            }
            self.reset_window(at);
            return;
        }
        if self.provisional {
            self.provisional = false;
            if !test.above(Z_REBASE) || self.wider_than_any_queue(&self.window, &test) {
                // Below the knee (or more spread than a queue makes it),
                // and long: the no-load latency, unbiased.
                self.reference = self.window;
                let trigger = self.cruising().weak_trigger;
                if trigger.is_some_and(|t| self.bound() && !self.exit_stands(&t)) {
                    // Against the reference the window just made, the
                    // exit was noise: resume Startup from here.
                    self.cruising_mut().weak_trigger = None;
                    self.resume_startup();
                    self.resumed_on_noise = true;
                }
                self.reset_window(at);
                return;
            }
        }
        if let Some(trigger) = self.cruising_mut().weak_trigger.take() {
            if !self.exit_stands(&trigger) && self.bound() {
                // Startup ended on noise: resume it from here.
                self.resume_startup();
                self.reset_window(at);
                return;
            }
        }
        if self.refusing() && self.clean.is_some_and(|c| c < self.level) {
            self.refused_window(at);
            return;
        }
        if self.max_in_flight <= 1 {
            // One request at a time holds no queue of ours: its latency is
            // the host's own.
            let window = self.window;
            // It may still raise the level.
            let bound = self.bound() && !self.refusing();
            // It replaces a reference it differs from once it holds as
            // many answers as replacing one takes; else it adds to it.
            let differs = test.above(Z_REBASE) || test.below(Z_REBASE);
            if differs && weak && self.events.is_none() {
                // A reference of a few of Startup's first answers, which
                // may all have been quicker than the host is now (judged
                // against them, every window would show a queue, and the
                // level would never leave 1): Startup ended against it,
                // not on an overload, on a queue the host's own latency
                // now shows was none. The window replaces it at once, and
                // Startup resumes from here, as after an exit on noise.
                self.rebase(window, at);
                self.resume_startup();
                return;
            }
            if differs && window.n >= 2.0 * MIN_REFERENCE {
                self.rebase(window, at);
            } else {
                self.reference.merge(&window);
                self.reference.cap(REFERENCE_MAX);
                self.pace();
                if !bound {
                    self.reset_window(at);
                }
            }
            if bound {
                self.raise(at);
            }
            return;
        }
        if test.above(Z_CUT) && self.wider_than_any_queue(&self.window, &test) {
            // The reference missed the tail this whole window holds.
            self.rebase(self.window, at);
            return;
        }
        if test.above(Z_CUT) && self.slower_than_any_queue(&self.window, &test) {
            // No queue of ours explains this window's latency: the host got
            // slower, at the same level and knee.
            let (level, knee) = (self.level, self.cruising().knee);
            self.slower(level, knee, at);
            return;
        }
        if test.above(Z_CUT) {
            let (c, _) = self.capacity(&self.window, &test);
            if self.window.mean_in_flight() - c >= Q_MIN {
                // Two windows in a row must show the queue: one alone does
                // by chance one time in 44 (more often with heavy tails);
                // one at three standard errors, one time in 740.
                let mut both = self.window;
                if test.above(Z_EXIT) {
                    self.cut(&both, &test, at);
                    return;
                }
                match self.cruising_mut().suspect.take() {
                    Some(first) => {
                        both.merge(&first);
                        if let Some(t) = Test::new(&both, &self.reference) {
                            self.cut(&both, &t, at);
                            return;
                        }
                    }
                    None => {
                        self.cruising_mut().suspect = Some(Box::new(both));
                        self.reset_window(at);
                        return;
                    }
                }
            }
        }
        self.cruising_mut().suspect = None;
        if test.below(Z_REBASE) && self.window.n >= 2.0 * MIN_REFERENCE {
            // The host got faster: the reference is what it serves now.
            self.rebase_faster(at);
            return;
        }
        if test.d / test.se.max(1e-12) < Z_UP && self.bound() && !self.refusing() {
            self.raise(at);
        } else if !self.bound() {
            // Not in use: nothing to learn about the knee; start afresh.
            self.reset_window(at);
        } else {
            // Neither clean enough to raise nor queued enough to cut: hold,
            // with a fresh window.
            self.cruising_mut().step = self.min_step();
            self.reset_window(at);
        }
    }

    /// Startup resumes from the level it is at, the knee it ended on
    /// forgotten (it ended on noise, or against a reference that proved
    /// wrong). The caller starts the window.
    fn resume_startup(&mut self) {
        self.cruising_mut().knee = f64::INFINITY;
        self.cruising_mut().headroom = 0.0;
        self.phase = Phase::Startup;
        self.ramp = Ramp::Round;
        // Its rounds, biased quick as before, make the reference again: the
        // first window in Cruise after it judges them again.
        self.provisional = true;
    }

    /// The window holds a queue: cut to the estimated capacity, at most by
    /// half, and verify.
    fn cut(&mut self, w: &Acc, test: &Test, at: f64) {
        let (c, headroom) = self.capacity(w, test);
        let (level, min_step) = (self.level, self.min_step());
        // A probe above the knee that found a queue goes back to the level
        // it left, clean window after window: the host serves that much.
        let left = self
            .clean
            .filter(|clean| self.cruising().probing && *clean < self.level);
        let cruising = self.cruising_mut();
        cruising.verify = Some(Box::new(Verify {
            trigger: *w,
            // (If the host got slower instead, a probe's level does not
            // come back: the one it left does.)
            level: left.unwrap_or(level),
            knee: cruising.knee,
            deeper: None,
            more: false,
        }));
        let before = cruising.knee;
        cruising.knee = c;
        cruising.headroom = headroom;
        if cruising.probing {
            // A probe above the knee found a queue: probe half as often.
            cruising.probe_every = (2 * cruising.probe_every).min(MAX_PROBE_EVERY);
        } else if c - headroom < before / 2.0 {
            // The knee fell by half or more: the probes that backed off
            // found the old one where it was, and tell nothing of this
            // one (a bimodal host at 1 s, cut from 8 to 1 by a reference
            // that missed its slow answers, waited 146 s for its first
            // probe at 16 windows, 48 s at 4).
            cruising.probe_every = MIN_PROBE_EVERY;
        }
        if let Some(left) = left.filter(|l| c - headroom < *l) {
            cruising.knee = left;
            cruising.headroom = 0.0;
        }
        cruising.probing = false;
        cruising.at_top = 0;
        cruising.step = min_step;
        self.clean = None;
        // Below one request in flight there is no queue of ours to cut.
        let level = (c - headroom).max(self.level / 2.0).max(1.0);
        let level = left.map_or(level, |left| level.max(left));
        self.set_level(level.min(self.level), at);
    }

    /// The window is more spread than any queue makes it: the reference
    /// missed a tail the window holds (Startup's rounds, or a window that
    /// closed before its slowest answers came). A queue that moves the
    /// mean of log latency by `d` adds at most `d²` to its variance (its
    /// waits, in log, lie between none and about twice their mean), and
    /// usually narrows it (a wait added to every answer compresses a
    /// tail, in log). The excess is tested at [`Z_EXIT`] standard errors,
    /// each variance's error taken at a kurtosis of 9 (the log of a Pareto
    /// tail, an exponential; a normal's is 3).
    fn wider_than_any_queue(&self, w: &Acc, test: &Test) -> bool {
        let r = &self.reference;
        if w.n < 2.0 * MIN_WINDOW || r.n < MIN_REFERENCE {
            return false;
        }
        let (vw, vr) = (w.variance(), r.variance());
        let se =
            (SPREAD_KURTOSIS - 1.0).sqrt() * (vw * vw / (w.n - 1.0) + vr * vr / (r.n - 1.0)).sqrt();
        vw - vr - test.d * test.d > Z_EXIT * se
    }

    /// Decides a cut under test on the window at the lower level.
    fn verify(&mut self, v: Verify, at: f64) {
        let want = (self.limit() as f64)
            .max(MIN_WINDOW)
            .max(self.to_tell(std::f64::consts::LN_2 / 2.0));
        let want = match v.deeper {
            // Enough, with the window before, to replace the reference.
            Some(first) if v.more => want.max(2.0 * MIN_REFERENCE - first.n),
            _ => want,
        };
        if !self.complete(want, at) {
            // A round trip's answers at the lower level.
            return;
        }
        let Some(test) = Test::new(&self.window, &self.reference) else {
            return;
        };
        let test = &test;
        if let Some(candidate) = v.deeper {
            // A window at half the level of `candidate`: if the latency fell
            // there too, it was a queue all along; if not, the host got
            // slower, and `candidate` and this window are its no-load
            // latency now.
            self.cruising_mut().verify = None;
            if !v.more
                && self.level > 1.0
                && Test::new(&self.window, &candidate).is_some_and(|t| t.above(Z_CUT))
            {
                // Slower at half the level than at the level, beyond the
                // noise: halving cannot make a host slower, so `candidate`
                // was taken while the latency still rose (a capacity that
                // just fell, its queue still building), and tells neither
                // a queue nor a slower host. This window takes its place,
                // and half the level again tells. (Taken for a slower host,
                // on the simulator's drop, seed 21, 16 workers that fell to
                // 4 at 10 s left both windows, queue and all, as the
                // no-load latency: the level stayed near 6 for the 15 s the
                // capacity was down, a mean queue of 1.24 over the crawl,
                // 0.21 with this rule.)
                self.cruising_mut().verify = Some(Box::new(Verify {
                    deeper: Some(self.window),
                    ..v
                }));
                self.set_level(self.level / 2.0, at);
                return;
            }
            if !v.more
                && test.below(Z_REBASE)
                && test.d < -std::f64::consts::LN_2 / 2.0
                && self.window.n >= 2.0 * MIN_REFERENCE
            {
                // Below the reference beyond doubt, by more than the
                // threshold a halving is judged by, with what replacing one
                // takes: the reference held a queue (Startup's short rounds
                // on a host of one worker, where the noise hid it), and
                // every verdict below would be taken against it. This
                // window replaces it, and the window above is judged
                // against what the host serves. (A smaller offset is the
                // re-measure's to find.)
                self.reference = self.window;
            }
            // Halving the level halves a queue's latency (down to the
            // no-load one) and leaves a slower host's as it was: the
            // likelier of the two, with the threshold halfway. A queue
            // that is a small share of the latency (a level a few per cent
            // above the knee) falls by that share only, less than halfway:
            // a fall beyond the noise (two standard errors), where
            // `candidate` held half a request or more, is one too. (Taken
            // for a slower host, it gave the level back, and the same cut
            // came round every few round trips.) Either fall tells a queue
            // only beyond the noise, and only where `candidate` was above
            // the reference beyond doubt (five standard errors): one less
            // sure than that was chosen for being slow, and the window
            // after it is quicker by regression alone. (A re-measure of 20
            // answers 2.3 standard errors above a reference of 24, on a
            // log-normal host of 8 workers with 5.3 in flight, then 2.4
            // below at half, cut the level to 1.3 for 110 s.) The nearer
            // of the two below says what it was instead.
            let against = Test::new(&candidate, &self.reference);
            let sure = against.as_ref().is_some_and(|t| t.above(Z_SURE));
            let queued = against.as_ref().is_some_and(|t| {
                let (c, _) = self.capacity(&candidate, t);
                candidate.mean_in_flight() - c >= Q_MIN
            });
            let below = Test::new(&self.window, &candidate).is_some_and(|t| t.below(Z_CUT));
            let fell = !v.more
                && below
                && sure
                && (self.window.mean < candidate.mean - std::f64::consts::LN_2 / 2.0 || queued);
            // Not a fall that tells a queue. A slower host keeps its
            // latency at half the level, where `candidate` had it; a queue
            // (or a `candidate` chosen for being slow, by noise) falls back
            // towards the reference: the nearer of the two says which,
            // once this window holds what replacing a reference takes.
            // Nearer the reference, the reference stays (taken for a slower
            // host, both windows made the reference, queue and all: a
            // raise's queue of 11 on a thousand workers, 1 % of the
            // latency, was then read as clean for 50 s), and the level and
            // knee come back for the windows at the level to judge afresh;
            // unless this window is well below `candidate` and the window
            // that cut was above the reference too: two windows in a row
            // above it are a queue, as at the level, and the cut stands.
            let drained = (candidate.mean - std::f64::consts::LN_2).max(self.reference.mean);
            let nearer_mean = self.window.mean < (candidate.mean + drained) / 2.0;
            // Nearer the reference on fewer answers than replacing one
            // takes: a slower host only if the reference weighs less than
            // the windows above it; else more answers at this level tell.
            // (Taken for a slower host at once, 8 answers at half made a
            // reference of a queue of 2 on 16 workers, and every probe
            // above the knee read clean against it after.)
            let contested = candidate.n
                + if v.trigger == candidate {
                    0.0
                } else {
                    v.trigger.n
                };
            if !v.more
                && !fell
                && nearer_mean
                && self.window.n < 2.0 * MIN_REFERENCE
                && self.reference.n >= contested
            {
                self.cruising_mut().verify = Some(Box::new(v));
                self.reopen_window();
                return;
            }
            let nearer = !v.more && nearer_mean && self.window.n >= 2.0 * MIN_REFERENCE;
            let twice = v.trigger != candidate
                && Test::new(&v.trigger, &self.reference).is_some_and(|t| t.above(Z_CUT));
            if fell || nearer && below && twice {
                if let Some(t) = against {
                    self.cut(&candidate, &t, at);
                }
            } else if nearer {
                self.level_back(v.level, v.knee, at);
            } else {
                let mut reference = self.window;
                reference.merge(&candidate);
                self.slower_host(reference, v.level, v.knee, at);
            }
            return;
        }
        if !test.above(Z_CUT) {
            // The latency came back to the reference: it was a queue, and
            // the cut drained it.
            self.cruising_mut().verify = None;
            self.reset_window(at);
            return;
        }
        if self.slower_than_any_queue(&self.window, test) {
            self.slower(v.level, v.knee, at);
            return;
        }
        // Still above the reference. Little's law says which: a queue keeps
        // the capacity estimate where it was, whatever the level; a host
        // that got slower makes it follow the level (the latency did not
        // fall with it).
        let base = self.reference.mean_latency();
        let capacity = |w: &Acc| w.mean_in_flight() * base / w.mean_latency();
        let moved = (capacity(&self.window) / capacity(&v.trigger)).ln();
        let levels = (self.window.mean_in_flight() / v.trigger.mean_in_flight()).ln();
        if (moved - levels).abs() < moved.abs() {
            // It looks like drift, but the trigger may have caught a queue
            // still building: half the level tells for sure.
            self.cruising_mut().verify = Some(Box::new(Verify {
                deeper: Some(self.window),
                ..v
            }));
            self.set_level(self.level / 2.0, at);
            return;
        }
        self.cruising_mut().verify = None;
        // A queue, and some remains: cut again.
        if self.window.n >= self.needed(test) {
            let (c, _) = self.capacity(&self.window, test);
            if self.window.mean_in_flight() - c >= Q_MIN {
                let window = self.window;
                self.cut(&window, test, at);
                return;
            }
        }
        self.reset_window(at);
    }

    /// Whether window `w` is slower than any queue of ours explains, at
    /// three standard errors: a host serves at least one request at a
    /// time, so with `n̄` in flight Little's law bounds the mean latency by
    /// `n̄ · T₀`, and the mean of `ln(latency)` lies below the log of the
    /// mean.
    fn slower_than_any_queue(&self, w: &Acc, test: &Test) -> bool {
        let bound = (w.mean_in_flight() * self.reference.mean_latency()).ln();
        test.df >= 4.0 && w.mean - bound > Test::quantile(Z_REBASE, test.df) * test.se.max(1e-12)
    }

    /// The window shows a slower host for sure: it is the new reference
    /// (with the answers that follow it, if it holds fewer than a
    /// reference replaced takes), and `level` and `knee` come back. The
    /// answers that complete it are taken at [`BASE_GAIN`] of `level` (a
    /// window at half is raised there): the re-measure's level, which
    /// holds no queue of ours, and quicker to fill than half.
    fn slower(&mut self, level: f64, knee: f64, at: f64) {
        let window = self.window;
        if window.n >= 2.0 * MIN_REFERENCE {
            self.slower_host(window, level, knee, at);
            return;
        }
        self.cruising_mut().verify = Some(Box::new(Verify {
            trigger: window,
            level,
            knee,
            deeper: Some(window),
            more: true,
        }));
        let gathering = level * BASE_GAIN;
        if gathering > self.level {
            self.set_level(gathering, at);
        } else {
            self.reset_window(at);
        }
    }

    /// A slower host: `reference` is its no-load latency, and the level and
    /// knee before the cut come back.
    fn slower_host(&mut self, reference: Acc, level: f64, knee: f64, at: f64) {
        self.reference = reference;
        // A probe above the knee that the change overlapped tells nothing
        // of the knee, and the new reference was taken there: with the
        // same workers, slower, the probe's queue made its answers
        // `level / knee` times as long as the host's own (Little's law).
        if self.cruising().probing {
            self.reference.scale((knee / level).min(1.0));
        }
        self.remeasure_later(at);
        self.level_back(level, knee, at);
    }

    /// The level and knee before a cut come back (for a probe's cut, the
    /// knee the probe left), the cut under test no longer.
    fn level_back(&mut self, level: f64, knee: f64, at: f64) {
        let cruising = self.cruising_mut();
        cruising.verify = None;
        cruising.knee = knee;
        let level = if cruising.probing {
            cruising.probing = false;
            cruising.at_top = 0;
            // Never below what a cut may leave (half the level, and one
            // request): a knee whose headroom, the part noise cannot
            // resolve, is as wide as itself tells no level. (Unbounded, a
            // log-normal host of 8 workers came back from a probe's test
            // at one request a minute, its `max_delay`, for 48 minutes.)
            level
                .min(knee - cruising.headroom)
                .max(level / 2.0)
                .max(1.0)
        } else {
            level
        };
        self.set_level(level, at);
    }

    /// The next re-measure of the no-load latency comes its interval from
    /// `at`: [`BASE_INTERVAL`], or [`BASE_ROUNDS`] round trips of the
    /// reference's latency if longer.
    fn remeasure_later(&mut self, at: f64) {
        self.cruising_mut().base_due =
            at + BASE_INTERVAL.max(BASE_ROUNDS * self.reference.mean_latency());
    }

    /// A run of answers far from the reference: a fresh window, judged
    /// whole, tells whether the host changed (the run itself is chosen by
    /// its latency, so it says nothing unbiased of the host's).
    fn remeasure(&mut self, at: f64) {
        self.reset_window(at);
        self.remeasuring = true;
    }

    /// The host got faster, by a whole window at the level: that window
    /// is the reference, and the re-measure below the level follows at
    /// once, to replace it again if it held a queue of ours.
    fn rebase_faster(&mut self, at: f64) {
        self.rebase(self.window, at);
        self.cruising_mut().base_due = at;
    }

    /// The host got faster (or slower, after a verified drift): the
    /// reference is what it serves now.
    fn rebase(&mut self, to: Acc, at: f64) {
        self.reference = to;
        self.cruising_mut().verify = None;
        self.reset_window(at);
        self.pace();
    }

    /// The highest level raises go to without a probe: below the knee by
    /// the part of it noise cannot resolve, and at most an overload's
    /// ceiling.
    fn top(&self) -> f64 {
        let cruising = self.cruising();
        (cruising.knee - cruising.headroom).min(self.events().err_ceiling)
    }

    /// Whether the delay is a pacing that the answers clock (see
    /// [`Throttle::paced`]): in Cruise, at a level of 1 or more, neither a
    /// probe above the knee nor above the top, and without a `min_delay`
    /// (a floor spaces every request).
    ///
    /// At the knee a delay that spaces every request holds one back
    /// whenever two answers come back closer together than it, and leaves
    /// a worker idle meanwhile: 8 workers whose latency rose tenfold were
    /// served 0.74 to 0.89 of what they could (drift-up, 45 seeds; 0.90
    /// to 0.93 on 39 of them clocked). Clocked by the answers, the requests
    /// that replace them go at once; the pacing still spreads a raise's.
    /// Startup keeps the spacing: its windows judge each raise (with
    /// answers clocking its rounds, a host of 2 workers at 500 ms saw the
    /// level reach 8, and a mean queue of 1.6). So does a probe above the
    /// knee or the top: clocked at a level above the host's capacity, the
    /// requests keep the queue the probe makes full while it is judged
    /// (log-normal σ 0.8 on 8 workers: mean queue 1.39 → 1.52 on seed 1,
    /// a bimodal host 0.97 → 0.68 of the oracle on seed 22).
    fn paced(&self) -> bool {
        self.phase == Phase::Cruise
            && self.level >= 1.0
            && !self.cruising().probing
            && self.level <= self.top()
            && self.limits.min_delay <= 0.0
    }

    /// A clean window in use: raise the level.
    fn raise(&mut self, at: f64) {
        if self.cruising().probing {
            if !self.cruising().probe_clean {
                // One clean window may be noise over a queue of one: the
                // next window at the probe's level confirms it.
                self.cruising_mut().probe_clean = true;
                self.reset_window(at);
                return;
            }
            // The probe above the knee was clean twice: the host grew.
            let cruising = self.cruising_mut();
            cruising.probing = false;
            cruising.probe_clean = false;
            cruising.probe_every = MIN_PROBE_EVERY;
            cruising.grown_from = cruising.knee * GROWN_MARGIN;
            cruising.knee = f64::INFINITY;
            cruising.headroom = 0.0;
        }
        let events = self.events();
        if self.level > events.err_ceiling && self.level < events.err_hi {
            // A probe above an overload ceiling went clean (a window at
            // the ceiling itself is none: it would forget the ceiling
            // whenever the level that failed is within a step of it).
            let (level, min_step) = (self.level, self.min_step());
            let events = self.events_mut();
            events.err_ceiling = level;
            // (Not after a free probe: a bucket of one token's rate lies
            // below the level that failed, and above it only the budget's
            // probes go.)
            let free = events.free_probe.is_some_and(|(_, probe)| probe == level);
            if !free && events.err_hi - events.err_ceiling < min_step {
                events.err_ceiling = f64::INFINITY;
                events.err_hi = f64::INFINITY;
            }
        }
        self.clean = Some(self.level);
        // (A clean window is not taken into the reference: near the knee it
        // may hold a queue too small to see, which would raise the
        // reference, then the knee, then the queue. The reference follows
        // drift through the re-measures below the level.)
        let Cruising {
            knee,
            headroom,
            step,
            ..
        } = *self.cruising();
        let top = self.top();
        let level = self.level;
        if level + step <= top {
            let next = level + step.max((top - level) / 2.0).min(top - level);
            let next = if top.is_finite() { next } else { level + step };
            // (Up to a little past the knee a clean probe forgot, one step
            // at a time: the probe told that the host grew, not how much.)
            self.cruising_mut().step = if next < self.cruising().grown_from {
                self.min_step()
            } else {
                (2.0 * step).min(self.min_step().max(next / 4.0))
            };
            self.set_level(next, at);
        } else if level < top {
            self.cruising_mut().step = self.min_step();
            self.set_level(top, at);
        } else {
            let cruising = self.cruising_mut();
            cruising.at_top = cruising.at_top.saturating_add(1);
            self.reset_window(at);
            if knee.is_finite() && top == knee - headroom {
                let cruising = self.cruising_mut();
                if cruising.at_top >= cruising.probe_every {
                    cruising.at_top = 0;
                    cruising.probing = true;
                    cruising.probe_clean = false;
                    let probe = top.round() + 1.0;
                    self.set_level(probe.max(level + self.min_step()), at);
                }
            } else if self.events().err_ceiling.is_finite() {
                // A pause costs the answers it kept from being sent, at the
                // level's rate (Little's law), besides the overloads.
                let events = self.events();
                let paused = self
                    .unit()
                    .map_or(0.0, |unit| events.event_pause * self.level / unit);
                let budget = (events.event_errors as f64 + paused) / E_BUDGET;
                let waited = at - events.last_event >= PAUSE_SPACING * events.event_pause;
                // (And all events so far: the refusals that found the rate
                // at the start are paid before the first probe.)
                let paid =
                    events.event_overloads as f64 <= E_BUDGET * events.answers_all as f64 + 1.0;
                // (Or a free probe: see `FREE_PROBES`.)
                let free =
                    events.free_probes > 0 && events.err_hi - events.err_ceiling >= self.min_step();
                if (free || (self.answers_since_event as f64 >= budget && paid)) && waited {
                    let probe =
                        (events.err_ceiling + events.err_hi.min(2.0 * events.err_ceiling)) / 2.0;
                    self.set_level(probe.max(level + self.min_step()), at);
                    if free {
                        let probe = self.level;
                        let events = self.events_mut();
                        events.free_probes -= 1;
                        events.free_probe = Some((level, probe));
                    }
                }
            }
        }
    }

    /// A window above a clean level was refused beyond noise: the errors
    /// came with the raise, so the level goes back to the clean one (or
    /// to the share the host served, if higher), and above it only by the
    /// probes of an overload ceiling.
    fn refused_window(&mut self, at: f64) {
        let Some(clean) = self.clean else {
            return;
        };
        // (At a rate, the share served less one standard error, when that
        // is above the clean level.)
        let n = (self.window.n + self.refused as f64).max(1.0);
        let p = self.window.n / n;
        let share = self.level * (p - (p * (1.0 - p) / n).sqrt());
        let level = if self.level < 1.0 {
            clean.max(share)
        } else {
            clean
        }
        .min(self.level);
        let (failed, errors) = (self.level, self.refused.max(1));
        self.back_below(failed, level, errors, at);
    }

    /// A raise to `failed` was refused (`errors` times, an event without a
    /// pause): the level goes back to `level`, the ceiling of the raises
    /// that stay free, and above it only probes go.
    fn back_below(&mut self, failed: f64, level: f64, errors: u64, at: f64) {
        let events = self.events_mut();
        events.err_hi = failed;
        events.err_ceiling = level;
        events.last_event = at;
        events.event_errors = errors;
        events.event_pause = 0.0;
        self.answers_since_event = 0;
        self.clean = None;
        self.cruising_mut().step = self.min_step();
        self.set_level(level, at);
    }

    /// Counts an answer to a request sent before the last overload event
    /// (its batch): once a few are in, the share served tells the level
    /// the host allowed when it refused, whatever burst it allowed before.
    fn batch(&mut self, ok: bool) {
        let Some(batch) = self.events.as_mut().and_then(|e| e.batch.as_mut()) else {
            return;
        };
        if ok {
            batch.ok = batch.ok.saturating_add(1);
        } else {
            batch.refused = batch.refused.saturating_add(1);
        }
        let total = batch.ok + batch.refused;
        if batch.ok == 0 || total < MIN_BATCH {
            return;
        }
        let allowed = batch.level * batch.ok as f64 / total as f64;
        if allowed < self.level {
            self.events_mut().err_ceiling = self.events().err_ceiling.min(allowed);
            let level = allowed.max(self.min_level());
            self.keep_unit(level);
            self.level = level;
            self.pace();
        }
    }

    /// A pause ends the episode since the last one: a token bucket (rate
    /// `R`, burst `B`) passes `n = B + R·t` requests of a rate above `R`
    /// in an episode of `t` seconds before it refuses one, the same `B`
    /// each time when the pauses are alike, so two episodes of different
    /// lengths give `R = Δn / Δt`. The episode is paired with the shortest
    /// one seen, which makes the difference longest as episodes lengthen.
    /// Only an episode sent at one level counts (sent above `R` throughout,
    /// as it ended refused: a level that rose during it may have left the
    /// bucket full for a while, and tokens beyond `B` are lost). `None`
    /// until two episodes fit a bucket (`R > 0`, `B > 0`, the longer
    /// passing [`BUCKET_COUNT`] requests more); an episode that passed
    /// nothing (a server refusing everything for now) starts the count
    /// afresh.
    fn bucket_rate(&mut self, sent: f64) -> Option<f64> {
        let events = self.events();
        if !events.resumed.is_finite()
            || sent < events.resumed
            || self.level != events.resumed_level
        {
            return None;
        }
        // The requests still out at the refusal were passed before it.
        let n = self.resumed_served as f64 + self.in_flight.saturating_sub(1) as f64;
        let t = sent - events.resumed;
        if n < 1.0 {
            self.events_mut().short_episode = (0.0, f64::INFINITY);
            return None;
        }
        let (n0, t0) = self.events().short_episode;
        if t < t0 {
            self.events_mut().short_episode = (n, t);
        }
        if !t0.is_finite() || t <= t0 || n - n0 < BUCKET_COUNT {
            return None;
        }
        let r = (n - n0) / (t - t0);
        let b = n - r * t;
        (r > 0.0 && b > 0.0 && r.is_finite()).then_some(r)
    }

    /// At a rate (one request at a time, evenly spaced) a token bucket
    /// whose rate `R` is a little below the level's refuses one request in
    /// every `1 / (1 − R·s)` (spacing `s`), like clockwork, and passes `n`
    /// between two refusals in `t` seconds, `R·t` within one (the bucket
    /// held less than a token at each). Refused that rarely (under a
    /// twentieth at a level 5 % above the rate), the CUSUM, which must
    /// take 2 % of random errors for noise, never sees it; random errors
    /// come at geometric intervals instead, two of them within one answer
    /// of each other about one time in thirty at 2 %. So two intervals
    /// at one level that passed the same count within one (at least
    /// [`MIN_CLOCKWORK_RUN`] each) send the level to the rate they passed,
    /// `(n + n′) / t` over both, the bucket's rate within one request in
    /// `t` (it becomes the ceiling of raises). A level still a little
    /// above the rate is refused again at longer intervals, and cut again
    /// closer (`(n + n′ − 1) / t`, always below the rate, was tried: it
    /// landed a tenth below it on the simulator's limit-req, 93 % of the
    /// oracle against 100 %). Whether it cut.
    fn periodic(&mut self, at: f64) -> bool {
        let level = self.level;
        let unit = self.unit();
        let events = self.events_mut();
        let last = events.refusals;
        let same = level < 1.0 && last.level == level && last.at.is_finite();
        events.refusals = Refusals {
            at,
            level,
            ok: 0,
            before: same.then_some(last.ok),
            lone: match (same, last.lone, last.ok) {
                (false, ..) => Some(Lone {
                    run: 1,
                    period: 0,
                    periods: 0,
                }),
                (true, Some(lone), 0) => Some(Lone {
                    run: lone.run.saturating_add(1),
                    ..lone
                }),
                (true, Some(lone), 1) if lone.period == 0 || lone.period == lone.run => {
                    Some(Lone {
                        run: 1,
                        period: lone.run,
                        periods: lone.periods.saturating_add(1),
                    })
                }
                _ => None,
            },
        };
        let (Some(before), Some(unit)) = (last.before.filter(|_| same), unit) else {
            return false;
        };
        let n = last.ok;
        if n.min(before) < MIN_CLOCKWORK_RUN || n.abs_diff(before) > 1 {
            return false;
        }
        // (Over both intervals: the one before began a spacing earlier.)
        let t = at - last.at + (before + 1) as f64 * unit / level;
        let rate = (n + before) as f64;
        let cut = rate / t * unit;
        if !(cut < level && cut > 0.0) {
            return false;
        }
        let events = self.events_mut();
        events.err_ceiling = events.err_ceiling.min(cut);
        events.event_overloads = events.event_overloads.saturating_add(2);
        events.refusals.before = None;
        self.set_level(cut, at);
        true
    }

    /// A refusal at the level of the last free probe (see
    /// [`Events::free_probe`]): the probe failed, and the level goes back
    /// to the one it was raised from, with the probe's as the level that
    /// failed. Whether it did.
    fn free_probe_failed(&mut self, at: f64) -> bool {
        let level = self.level;
        let events = self.events_mut();
        let Some((from, probe)) = events.free_probe.take() else {
            return false;
        };
        if level != probe {
            return false;
        }
        events.event_overloads = events.event_overloads.saturating_add(1);
        self.back_below(probe, from, 1, at);
        true
    }

    fn on_overload(&mut self, at: f64, sent: f64, pause: f64) {
        if sent < self.events().last_event {
            // Answered to a request sent before the last reaction.
            self.batch(false);
            return;
        }
        self.count(true);
        let events = self.events_mut();
        events.answers_all = events.answers_all.saturating_add(1);
        if pause == 0.0 && self.free_probe_failed(at) {
            return;
        }
        if pause == 0.0 && self.periodic(at) {
            return;
        }
        // At a rate, a refusal sent after an event, with no success since
        // it: the cut was not enough, and a token bucket has shown that it
        // passes less than one request a spacing. The same at a limit of
        // one: nothing else of ours is out, so the refusal was not for a
        // place that a success of ours held, and each refused request is
        // followed at once by the next.
        let again = self.limit() <= 1
            && self.events().last_event.is_finite()
            && self.events().batch.is_some();
        if pause == 0.0 && self.events().cusum < H_EVENT && !again {
            return;
        }
        let errors = self.events().errors;
        let events = self.events_mut();
        events.event_overloads = events.event_overloads.saturating_add(errors.max(1));
        let share = self.served_share(false);
        let share_any = self.served_share(true);
        let succession = self.refused_whole(pause);
        // Raises are free up to the share served.
        let mut share_top = None;
        // Below this the level fails, when a bucket of one token refused.
        let mut one_token_hi = None;
        let served_level = self.served_level(at);
        let served_any = self.prev + self.bucket > 0;
        // What was served since the last pause may still hold the burst the
        // server allowed after it.
        let fresh = at - self.events().resumed < 2.0 * self.bucket_len();
        let bucket = if pause > 0.0 {
            self.bucket_rate(sent).and_then(|r| Some(r * self.unit()?))
        } else {
            None
        };
        if pause > 0.0 {
            self.episode = None;
            // Nothing is sent during the pause: the count starts afresh
            // after it.
            self.bucket_start = at + pause;
            self.events_mut().resumed = at + pause;
            self.resumed_served = 0;
            self.bucket = 0;
            self.prev = 0;
            self.prev_len = 0.0;
        }
        self.run_answers = 0;
        self.run_errors = 0;
        self.answers_since_event = 0;
        let level = self.level;
        let events = self.events_mut();
        events.cusum = 0.0;
        events.errors = 0;
        events.answers = 0;
        events.free_probes = 0;
        events.free_probe = None;
        events.last_event = at;
        events.event_errors = errors.max(1);
        events.event_pause = pause;
        events.batch = Some(Batch {
            level,
            ok: 0,
            refused: 0,
        });
        if pause > 0.0 && !served_any {
            // Nothing served since the last pause: the server refuses
            // everything for now, whatever the rate; the pause is the whole
            // reaction, and the slot resumes at its level.
            self.reset_window(at);
            self.events_mut().resumed_level = self.level;
            return;
        }
        if self.reference.n == 0.0 {
            // Refused without a pause, and nothing ever served: no sign that
            // more than one at a time helps. A rate below one request per
            // `NO_SERVICE_BASE`, slower by β each event, so that a host that
            // refuses everything is left in peace.
            self.set_level(BETA * self.level.min(1.0), at);
            return;
        }
        self.phase = Phase::Cruise;
        self.cruising_mut().verify = None;
        self.cruising_mut().probing = false;
        // Requests were served, then refused: the level is too much for
        // the host. To what it served (BBRv2's `inflight_lo`: what was
        // delivered). A pause costs a round of answers, so after one the
        // level goes safely below what was served (one standard error of
        // its count), and at least by β; without one, it goes no lower than
        // the last clean level, and at most by β (BBRv2's bound on a
        // round's cut).
        let clean = self.clean.filter(|c| *c < self.level);
        let level = if pause > 0.0 {
            // (At least by β when what was served came just after an
            // earlier pause: it may hold the burst the server allowed then.)
            match (bucket, served_level) {
                // A token bucket's rate: kept, it refuses no more.
                (Some(rate), _) => rate,
                (None, Some((_, safe))) if fresh => safe.min(BETA * self.level),
                (None, Some((_, safe))) => safe,
                (None, None) => BETA * self.level,
            }
        } else {
            let served = served_level.map(|(_, safe)| safe);
            match (succession, share) {
                // A run refused whole: nothing is served at this rate now,
                // whatever was served or clean before it.
                (Some((estimate, top)), _) => {
                    share_top = Some(top);
                    estimate
                }
                // The share the host served over the test's run: a rate
                // limit serves `R` of a rate `r` above it, `R / r` of it.
                (None, Some(share)) => {
                    share_top = Some(share);
                    let lone = self.events().refusals.lone;
                    if let Some(lone) = lone.filter(|l| l.periods >= MIN_LONE_RUNS) {
                        // A bucket of one token: its rate is below
                        // `r / (k − 1)`, maybe well above `r / k`.
                        one_token_hi = Some(self.level / f64::from(lone.period.max(1)));
                        self.events_mut().free_probes = FREE_PROBES;
                    }
                    served.unwrap_or(0.0).max(share)
                }
                (None, None) => match (served, clean, share_any) {
                    (Some(s), Some(c), _) => s.max(c).max(BETA * self.level),
                    (None, None, Some(share)) => {
                        share_top = Some(share);
                        share
                    }
                    (s, c, _) => s.or(c).unwrap_or(0.0).max(BETA * self.level),
                },
            }
        };
        // (Above a rate only: there each event cuts by β at most, and what
        // was served lately may hold a burst. At a rate the share served
        // says it better.)
        let episode = if pause > 0.0 || self.level < 1.0 {
            None
        } else {
            self.episode_level(at).filter(|e| *e < level)
        };
        let level = episode.unwrap_or(level).min(self.level);
        // (Refused again at a rate: to the rate since the episode's last
        // success, `1 / t` with nothing passed, half the last one, as each
        // spacing was refused after the one before; never above the rate
        // since its first refusal.)
        let again_at = (again && pause == 0.0)
            .then(|| match (self.episode_level(at), self.unserved_level(at)) {
                (Some(episode), Some(unserved)) => Some(episode.min(unserved)),
                (episode, unserved) => episode.or(unserved),
            })
            .flatten();
        let level = again_at.map_or(level, |e| e.min(level));
        if bucket.is_some() {
            // The bucket's rate says what the answers still out would.
            self.events_mut().batch = None;
        }
        if level < self.level {
            // Up to what was served, raises are free; above, they are
            // probes paid from a budget.
            self.events_mut().err_hi = self.level;
            // (After a pause, what was served may hold a burst the server
            // allowed once: the ceiling is the safe level. At a rate, the
            // share served is the rate limit's own measure, where the
            // count of successes still holds the burst it allowed first:
            // kept as the ceiling, a few per cent above the limit would
            // be refused for good, below what the CUSUM can see.)
            let ceiling = match served_level {
                Some((served, _)) if pause == 0.0 && served < self.level => served.max(level),
                _ => level,
            };
            self.events_mut().err_ceiling = share_top.unwrap_or(ceiling);
            if let Some(episode) = episode {
                self.events_mut().err_ceiling = self.events().err_ceiling.min(episode);
            }
            if let Some(hi) = one_token_hi {
                let events = self.events_mut();
                events.err_hi = events.err_hi.min(hi).max(events.err_ceiling);
            }
        }
        self.clean = None;
        self.cruising_mut().step = self.min_step();
        self.set_level(level, at);
        if pause > 0.0 {
            self.events_mut().resumed_level = self.level;
        }
    }
}

impl MakeState for Arc<Adaptive> {
    type State = Knee;

    fn fresh(&self) -> Knee {
        self.knee()
    }

    /// As [`Knee`]'s (the lazy policy's tests check the two agree).
    fn owns_overload(&self) -> bool {
        true
    }
}

impl Policy for Knee {
    /// Paced (see [`Throttle::paced`]) in Cruise at a level of 1 or more up
    /// to the top raises go to ([`Knee::paced`]); spaced otherwise.
    fn throttle(&self) -> Throttle {
        if self.paced() {
            Throttle::paced(self.delay, self.gate_limit())
        } else {
            Throttle::new(self.delay, self.gate_limit())
        }
    }

    /// Starts Startup from half the learned limit, and the learned delay,
    /// instead of `initial_concurrency` and `start_delay`; Startup then
    /// measures the no-load latency there and grows back to the knee in a
    /// few round trips. Half, because the reference is measured at the
    /// first level: if the host's capacity fell since, a start at the old
    /// limit would take its queue for no load, and never see it.
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let level = (learned.concurrency() / 2).max(1) as f64;
        self.level = within(level, 1.0, self.max_level());
        let delay = learned.delay_secs();
        if !delay.is_nan() {
            self.delay = within(delay, self.limits.min_delay, self.limits.max_delay);
        }
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let latency = sample.latency_secs();
        let overload = sample.outcome() == Outcome::Overload;
        // An overload may be answered at once; its latency only dates it.
        let latency = if overload && !(latency > 0.0 && latency.is_finite()) {
            0.0
        } else {
            latency
        };
        let usable = latency > 0.0 && latency.is_finite();
        let stamped = sample.at_secs().filter(|a| a.is_finite());
        if stamped.is_none() && !(usable || overload) {
            return self.throttle();
        }
        // The layer stamps each answer; a trace without times gets a
        // closed loop's: answers `latency / in flight` apart.
        let at = match stamped {
            Some(at) => at.max(self.last_at),
            None => self.last_at + latency / sample.in_flight().max(1) as f64,
        };
        self.last_at = at;
        let sent = if usable || overload { at - latency } else { at };
        self.in_flight = sample.in_flight();
        // Every answer tells a window that one of its requests is back.
        let (seq, dispatched) = sample.order().unwrap_or((0, 0));
        self.dispatched = dispatched;
        let belongs = self.belongs(sent, at, seq);
        if sample.outcome() == Outcome::Ignore || !(usable || overload) {
            return self.throttle();
        }
        self.episode(overload, sent);
        if belongs != Belongs::Stale && sent >= self.events().last_event {
            self.run_answers = self.run_answers.saturating_add(1);
            self.run_errors = self.run_errors.saturating_add(u64::from(overload));
        }
        if overload {
            match belongs {
                Belongs::Window => self.refused = self.refused.saturating_add(1),
                Belongs::Next => {
                    let next = self.after.get_or_insert_with(Box::default);
                    next.refused = next.refused.saturating_add(1);
                }
                Belongs::Stale => {}
            }
        }
        match sample.outcome() {
            Outcome::Overload => {
                let pause = sample.pause_secs();
                let pause = if pause.is_finite() {
                    pause.max(0.0)
                } else {
                    0.0
                };
                self.on_overload(at, sent, pause);
            }
            _ => self.on_success(latency, sample.in_flight(), at, sent, belongs),
        }
        self.throttle()
    }

    fn owns_overload(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MakePolicy;
    use http::StatusCode;

    #[test]
    fn slots_with_the_same_parameters_share_one_copy() {
        let a = Adaptive::default();
        let (first, second) = (a.shared(), a.clone().shared());
        assert!(Arc::ptr_eq(&first, &second));
        let other = Adaptive::default().initial_concurrency(5);
        let third = other.shared();
        assert!(!Arc::ptr_eq(&first, &third));
        assert_eq!(*third, other);
        // Back to the first parameters: a copy of their own again, equal.
        let fourth = a.shared();
        assert_eq!(*fourth, a);
        assert!(Arc::ptr_eq(&fourth, &a.shared()));
    }

    fn at(latency: f64, in_flight: usize, at: f64) -> Sample {
        Sample::from_secs_f64(latency, StatusCode::OK)
            .with_in_flight(in_flight)
            .with_at(at)
    }

    #[test]
    fn acc_merges_as_if_pushed_together() {
        let mut a = Acc::default();
        let mut b = Acc::default();
        let mut all = Acc::default();
        for (i, x) in [0.1, 0.2, 0.15, 0.3, 0.12, 0.5, 0.25].iter().enumerate() {
            if i % 2 == 0 {
                a.push(*x, 1.0);
            } else {
                b.push(*x, 2.0);
            }
            all.push(*x, if i % 2 == 0 { 1.0 } else { 2.0 });
        }
        a.merge(&b);
        assert!((a.mean - all.mean).abs() < 1e-12);
        assert!((a.m2 - all.m2).abs() < 1e-12);
        assert_eq!(a.n, all.n);
    }

    #[test]
    fn student_quantile_is_close() {
        // Student's t at 97.7 % (z = 2): 2.87 at 4, 2.32 at 10, 2.09 at 30.
        for (df, t) in [(4.0, 2.87), (10.0, 2.32), (30.0, 2.09)] {
            let q = Test::quantile(2.0, df);
            assert!((q - t).abs() / t < 0.03, "{df}: {q} vs {t}");
        }
    }

    #[test]
    fn startup_ramps_then_settles_at_the_knee() {
        // A host of 8 workers at 100 ms, fed as a closed loop would: each
        // round trip, `limit` answers with latency 100 ms × max(1, n / 8).
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        let mut now = 0.0;
        let mut limits = Vec::new();
        for _ in 0..40 {
            let limit = p.throttle().concurrency();
            let latency = 0.1 * (limit as f64 / 8.0).max(1.0);
            now += latency;
            for i in 0..limit {
                p.on_sample(&at(latency * (1.0 + 0.01 * (i % 3) as f64), limit, now));
            }
            limits.push(p.throttle().concurrency());
        }
        let last = *limits.last().unwrap();
        assert!((8..=9).contains(&last), "{limits:?}");
        assert!(limits.iter().all(|l| *l <= 24), "{limits:?}");
    }

    /// A closed loop on a host of `workers` at `base` seconds (± 1 %), with
    /// every `every`-th answer an overload (none if 0) carrying `pause`
    /// seconds; returns the limits after each round trip.
    fn run(
        p: &mut Knee,
        workers: f64,
        base: f64,
        rounds: usize,
        every: usize,
        pause: f64,
    ) -> Vec<usize> {
        let mut now = 0.0;
        let mut k = 0;
        let mut limits = Vec::new();
        for _ in 0..rounds {
            let limit = p.throttle().concurrency();
            let latency = base * (limit as f64 / workers).max(1.0);
            now += latency;
            for i in 0..limit {
                k += 1;
                let sample = if every > 0 && k % every == 0 {
                    Sample::from_secs_f64(latency, StatusCode::SERVICE_UNAVAILABLE)
                        .with_pause(pause)
                } else {
                    Sample::from_secs_f64(latency * (1.0 + 0.01 * (i % 3) as f64), StatusCode::OK)
                };
                p.on_sample(&sample.with_in_flight(limit).with_at(now));
            }
            limits.push(p.throttle().concurrency());
        }
        limits
    }

    /// Answers at `latency`, `n` of them, a millisecond apart from `now`,
    /// with `in_flight` out.
    fn answers(p: &mut Knee, latency: f64, n: usize, in_flight: usize, now: &mut f64) {
        for _ in 0..n {
            *now += 0.001;
            p.on_sample(&at(latency, in_flight, *now));
        }
    }

    /// A reference of 1 000 answers at 8 in flight, log-normal around
    /// 100 ms with a spread σ of 0.8.
    fn lognormal_reference() -> Acc {
        Acc {
            n: 1000.0,
            mean: 0.1f64.ln(),
            m2: 0.64 * 999.0,
            sum_latency: 1000.0 * 0.1 * (0.32f64).exp(),
            sum_in_flight: 8000.0,
        }
    }

    #[test]
    fn a_run_that_cuts_at_once_is_as_rare_in_time_at_any_level() {
        // A reference of log-normal spread σ 0.8: an answer is above twice
        // the typical latency with probability Q(ln 2 / 0.8) = Q(0.866),
        // 0.1932 (a normal table). The run must be the shortest whose
        // chance, taken at each of a round trip's `level` answers, is below
        // one in a million round trips.
        let mut k = Adaptive::default().knee();
        k.reference = lognormal_reference();
        let p: f64 = 0.1932;
        for (level, run) in [(1.0, 9), (8.0, 10), (64.0, 11), (1000.0, 13)] {
            k.level = level;
            assert_eq!(k.fast_run(), run, "at {level} in flight");
            let odds = |len: u32| level * p.powi(len as i32);
            assert!(odds(run) < 1e-6 && odds(run - 1) > 1e-6, "at {level}");
        }
        // A steady host (σ 0.06): the least run, 6, at any level.
        k.reference.m2 = 0.0036 * 999.0;
        k.level = 1000.0;
        assert_eq!(k.fast_run(), FAST_RUN);
    }

    #[test]
    fn a_run_is_judged_once_its_last_instant_is_over() {
        // Settled at 8 workers × 100 ms, with a log-normal spread of σ 0.8
        // (a run of 10 slow answers cuts at 8 in flight). Then, at one
        // instant, 12 answers at three times the typical latency: a batch
        // that hands over its slowest answers first. A quick answer later
        // at the same instant breaks the run; if none comes, the run cuts
        // at the next instant's answer.
        let mut settled = Adaptive::default().knee();
        let limits = run(&mut settled, 8.0, 0.1, 60, 0, 0.0);
        assert_eq!(settled.phase, Phase::Cruise);
        settled.reference = lognormal_reference();
        let level = limits[59];
        assert_eq!(settled.fast_run(), 10);
        let instant = settled.last_at + 0.5;
        let batch = |k: &mut Knee, quick_last: bool| {
            for _ in 0..12 {
                k.on_sample(&at(0.3, level, instant));
            }
            if quick_last {
                k.on_sample(&at(0.1, level, instant));
            }
            k.on_sample(&at(0.1, level, instant + 0.001));
            k.throttle().concurrency()
        };
        let mut broken = settled.clone();
        assert_eq!(batch(&mut broken, true), level);
        let mut whole = settled.clone();
        assert!(batch(&mut whole, false) < level);
    }

    #[test]
    fn a_window_wider_than_any_queue_shows_a_reference_that_missed_its_tail() {
        use crate::rng::next_unit;
        let mut seed = 7u64;
        // Pareto α 1.5 at 10 ms: the log of each answer is exponential.
        let mut pareto = || 0.01 * next_unit(&mut seed).max(1e-12).powf(-1.0 / 1.5);
        let (mut whole, mut missed) = (Acc::default(), Acc::default());
        for _ in 0..2000 {
            let latency = pareto();
            whole.push(latency, 100.0);
            // A round that ends before the slow answers come.
            if latency < 0.025 {
                missed.push(latency, 100.0);
            }
        }
        let mut k = Adaptive::default().knee();
        k.reference = missed;
        let test = Test::new(&whole, &missed).unwrap();
        assert!(test.above(Z_EXIT), "{test:?}");
        assert!(k.wider_than_any_queue(&whole, &test));
        // The same host with a queue: a wait of 3 ms added to every answer,
        // against a whole reference. The mean test sees it; the spread is
        // narrower.
        let mut queued = Acc::default();
        for _ in 0..2000 {
            queued.push(pareto() + 0.003, 100.0);
        }
        k.reference = whole;
        let test = Test::new(&queued, &whole).unwrap();
        assert!(test.above(Z_EXIT), "{test:?}");
        assert!(!k.wider_than_any_queue(&queued, &test));
        // A steady host (100 ms ± 10 %) whose queue makes waits of 0 to
        // 25 ms: wider, but by less than a queue can make it.
        let mut unit = || next_unit(&mut seed);
        let (mut steady, mut waits) = (Acc::default(), Acc::default());
        for _ in 0..2000 {
            steady.push(0.1 * (0.9 + 0.2 * unit()), 8.0);
        }
        for _ in 0..600 {
            waits.push(0.1 * (0.9 + 0.2 * unit()) + 0.025 * unit(), 9.0);
        }
        k.reference = steady;
        let test = Test::new(&waits, &steady).unwrap();
        assert!(test.above(Z_EXIT), "{test:?}");
        assert!(waits.variance() > steady.variance());
        assert!(!k.wider_than_any_queue(&waits, &test));
    }

    #[test]
    fn a_run_of_quick_answers_is_not_taken_for_the_host() {
        // Settled at 8 workers × 100 ms, then ten answers in a row at a
        // tenth of that (noise chosen by its latency), then the host as
        // before: the reference stays, and so does the level.
        let mut k = Adaptive::default().knee();
        let limits = run(&mut k, 8.0, 0.1, 60, 0, 0.0);
        assert_eq!(k.phase, Phase::Cruise);
        let (before, level) = (k.reference.mean_latency(), limits[59]);
        let mut now = k.last_at + 0.1;
        answers(&mut k, 0.01, 10, level, &mut now);
        for _ in 0..40 {
            answers(&mut k, 0.1, 1, level, &mut now);
            let after = k.reference.mean_latency();
            assert!((after / before - 1.0).abs() < 0.1, "{before} → {after}");
            assert!(
                k.throttle().concurrency() >= level - 1,
                "{level} → {:?}",
                k.throttle()
            );
        }
    }

    #[test]
    fn a_host_ten_times_quicker_is_measured_afresh() {
        let mut k = Adaptive::default().knee();
        let limits = run(&mut k, 8.0, 0.1, 60, 0, 0.0);
        let level = limits[59];
        let mut now = k.last_at + 0.1;
        answers(&mut k, 0.01, 40, level, &mut now);
        let base = k.reference.mean_latency();
        assert!((0.009..0.012).contains(&base), "{base}");
    }

    /// The answers to `limit` requests sent a round trip ago, all at `now`,
    /// at `latency` and up to 2 % above it.
    /// A controller that found its level of 8 on 8 workers at 100 ms, and
    /// the time of its last answer.
    fn at_eight_workers() -> (Knee, f64) {
        let mut k = Adaptive::default().knee();
        let limits = run(&mut k, 8.0, 0.1, 60, 0, 0.0);
        assert_eq!(limits[59], 8);
        let now = k.last_at;
        (k, now)
    }

    /// One round trip of a closed loop at the limit, on `workers` at
    /// 100 ms, or with every answer at `latency` if given.
    fn closed_round(k: &mut Knee, workers: f64, now: &mut f64, latency: Option<f64>) {
        let limit = k.throttle().concurrency();
        let latency = latency.unwrap_or(0.1 * (limit as f64 / workers).max(1.0));
        *now += latency;
        round_trip(k, latency, limit, *now);
    }

    fn round_trip(k: &mut Knee, latency: f64, limit: usize, now: f64) {
        for i in 0..limit {
            let sample =
                Sample::from_secs_f64(latency * (1.0 + 0.01 * (i % 3) as f64), StatusCode::OK);
            k.on_sample(&sample.with_in_flight(limit).with_at(now));
        }
    }

    #[test]
    fn a_probe_told_a_slower_host_comes_back_no_lower_than_a_cut() {
        // A probe at 9 cut and tested; the test tells a slower host, and
        // the level the probe left comes back. With a knee estimate whose
        // headroom is as wide as itself (noise, on a log-normal host),
        // `knee - headroom` is no level at all: the level comes back to no
        // less than half the probe's, as a cut would leave it, not to a
        // rate of one request every `max_delay`.
        let (mut k, now) = at_eight_workers();
        k.cruising_mut().probing = true;
        k.cruising_mut().headroom = 8.0;
        k.level_back(9.0, 8.0, now);
        assert!(k.level >= 4.5, "{}", k.level);
        // A knee that tells: the level the probe left, as before.
        let (mut k, now) = at_eight_workers();
        k.cruising_mut().probing = true;
        k.cruising_mut().headroom = 0.5;
        k.level_back(9.0, 8.0, now);
        assert_eq!(k.level, 7.5);
    }

    /// A cut of `by` from the level, under test, with the reference as
    /// the window that made it: the level cut to.
    fn cut_under_test(k: &mut Knee, by: f64, now: f64) -> f64 {
        let (level, knee, trigger) = (k.level, k.cruising().knee, k.reference);
        k.cruising_mut().verify = Some(Box::new(Verify {
            trigger,
            level,
            knee,
            deeper: None,
            more: false,
        }));
        k.set_level(level - by, now);
        k.level
    }

    #[test]
    fn a_host_found_faster_above_its_knee_is_measured_again_below_it() {
        // 8 workers at 1 s, the level a probe above them (9 in flight, a
        // queue of one) when the host gets ten times faster. The window
        // at the level that shows it faster holds that queue (latencies
        // 9/8 of the host's): taken as the reference, the level would sit
        // above the knee with a queue read as none. The re-measure below
        // the level that follows at once finds the host's own latency.
        let mut k = Adaptive::default().knee();
        let limits = run(&mut k, 8.0, 1.0, 60, 0, 0.0);
        assert_eq!(limits[59], 8);
        let mut now = k.last_at;
        k.set_level(9.15, now);
        for _ in 0..120 {
            closed_round(&mut k, 8.0, &mut now, None);
        }
        let reference = k.reference.mean.exp();
        assert!(reference < 0.103, "{reference}");
        assert!(k.throttle().concurrency() <= 8, "{}", k.level);
    }

    #[test]
    fn a_capacity_that_falls_while_a_cut_is_verified_is_cut_at_once() {
        // 32 workers at 100 ms. A cut to 30 is under test (its window, a
        // round trip at the lower level, not yet back) when the host falls
        // to 8 workers: the answers sent at 30 wait behind a queue of 22,
        // four times the host's latency and twice any latency the queue
        // that made the cut could leave. A run of them is acted on at once,
        // as it is outside a test: the level falls (by half, at most, a
        // cut) before the window under test is back.
        let mut k = Adaptive::default().knee();
        let limits = run(&mut k, 32.0, 0.1, 80, 0, 0.0);
        assert!((30..=34).contains(&limits[79]), "{limits:?}");
        let mut now = k.last_at;
        let cut = cut_under_test(&mut k, 2.0, now);
        let limit = k.throttle().concurrency();
        // The round trip after the cut, skipped (a queue draining), then
        // the first 20 answers of the window under test.
        now += 0.4;
        for i in 0..limit + 20 {
            now += 0.4 / limit as f64;
            let latency = 0.4 * (1.0 + 0.01 * (i % 3) as f64);
            k.on_sample(&at(latency, limit, now));
        }
        assert!(k.level <= 0.55 * cut, "{} from {cut}", k.level);
        // The same run at eight workers that got ten times slower is no
        // queue of ours (no eight in flight make a latency ten times the
        // host's): the test under way tells, as before.
        let (mut k, mut now) = at_eight_workers();
        let cut = cut_under_test(&mut k, 1.0, now);
        now += 1.0;
        for i in 0..7 + 6 {
            now += 1.0 / 7.0;
            let latency = 1.0 * (1.0 + 0.01 * (i % 3) as f64);
            k.on_sample(&at(latency, 7, now));
        }
        assert_eq!(k.level, cut);
    }

    #[test]
    fn a_host_ten_times_slower_gets_its_level_back_without_a_window_at_half() {
        // 8 workers at 100 ms, then at 1 s: at half the level (or at a cut
        // of it), a latency above what any queue of ours explains is the
        // host's own, and no window at half of that again is needed.
        let (mut k, mut now) = at_eight_workers();
        let mut lowest = usize::MAX;
        let mut back = None;
        for round in 0..40 {
            let limit = k.throttle().concurrency();
            lowest = lowest.min(limit);
            let latency = 1.0 * (limit as f64 / 8.0).max(1.0);
            now += latency;
            round_trip(&mut k, latency, limit, now);
            if back.is_none() && round > 0 && k.throttle().concurrency() >= 8 {
                back = Some(round);
            }
        }
        assert!(lowest >= 4, "went down to {lowest}");
        assert!(
            back.is_some_and(|r| r <= 12),
            "back at 8 after {back:?} rounds"
        );
        let base = k.reference.mean_latency();
        assert!((0.95..1.05).contains(&base), "{base}");
    }

    #[test]
    fn a_knee_that_fell_by_half_is_probed_as_often_as_a_new_one() {
        // 8 workers at 100 ms until the probes above them back off, then
        // 2 workers: the knee falls to 2, and the next probe comes within
        // 4 windows, not 16.
        let (mut k, mut now) = at_eight_workers();
        let mut workers = 8.0;
        for round in 0..2000 {
            if workers == 8.0 && k.cruising().probe_every == MAX_PROBE_EVERY {
                workers = 2.0;
            }
            let limit = k.throttle().concurrency();
            let latency = 0.1 * (limit as f64 / workers).max(1.0);
            now += latency;
            round_trip(&mut k, latency, limit, now);
            let c = k.cruising();
            if workers == 2.0 && c.knee < 4.0 && c.verify.is_none() {
                assert_eq!(c.probe_every, MIN_PROBE_EVERY, "after {round} round trips");
                return;
            }
        }
        panic!("the knee never fell below 4 ({workers} workers)");
    }

    #[test]
    fn the_no_load_latency_is_remeasured_at_two_thirds_of_the_level() {
        // 8 workers at 100 ms: the re-measure comes due and sends at two
        // thirds of the level, then the level comes back.
        let (mut k, mut now) = at_eight_workers();
        let mut remeasured = None;
        for _ in 0..400 {
            closed_round(&mut k, 8.0, &mut now, None);
            match (remeasured, k.cruising().base_probe) {
                (None, Some(level)) => {
                    assert_eq!(k.level, level * BASE_GAIN);
                    remeasured = Some(level);
                }
                (Some(level), None) => {
                    assert_eq!(k.level, level);
                    return;
                }
                _ => {}
            }
        }
        panic!("no re-measure came and went ({remeasured:?})");
    }

    #[test]
    fn the_answers_clock_the_requests_at_the_knee_and_nowhere_else() {
        let k = Adaptive::default().knee();
        assert!(!k.throttle().is_paced(), "Startup spaces every request");
        // 8 workers at 100 ms: Cruise at the knee, with probes above it.
        let (mut k, mut now) = at_eight_workers();
        assert_eq!(k.phase, Phase::Cruise);
        let (mut clocked, mut probes) = (0, 0);
        for round in 0..600 {
            closed_round(&mut k, 8.0, &mut now, None);
            let paced = k.throttle().is_paced();
            if k.cruising().probing || k.level > k.top() {
                assert!(!paced, "a probe at {} is paced ({round})", k.level);
                probes += 1;
            } else {
                assert!(paced, "the level {} is spaced ({round})", k.level);
                clocked += 1;
            }
        }
        assert!(
            clocked > 300 && probes > 0,
            "{clocked} clocked, {probes} probes"
        );
        // A floor spaces every request.
        let mut k = Adaptive::default().min_delay_secs(0.001).knee();
        run(&mut k, 8.0, 0.1, 60, 0, 0.0);
        assert_eq!(k.phase, Phase::Cruise);
        assert!(!k.throttle().is_paced());
        // So does a rate (a level below 1): every 503 is refused load.
        let mut k = Adaptive::default().knee();
        run(&mut k, 8.0, 0.1, 60, 1, 0.0);
        assert!(k.level < 1.0, "level {}", k.level);
        assert!(!k.throttle().is_paced());
    }

    #[test]
    fn one_clean_window_of_a_probe_does_not_forget_the_knee() {
        // 8 workers at 100 ms; every probe at 9 gets a first window whose
        // queue noise hid (answers at 100 ms), then the queue it holds.
        // The knee stays: the level never goes above the probe, and comes
        // back to 8 (before: the knee was forgotten on the first window,
        // and the level went on to 10).
        let (mut k, mut now) = at_eight_workers();
        let mut probes = 0;
        let mut was_probing = false;
        for round in 0..600 {
            let c = k.cruising();
            let hidden = c.probing && !c.probe_clean;
            probes += usize::from(c.probing && !was_probing);
            was_probing = c.probing;
            closed_round(&mut k, 8.0, &mut now, hidden.then_some(0.1));
            let after = k.throttle().concurrency();
            assert!(after <= 9, "{after} in flight after {round} round trips");
            assert!(
                k.cruising().knee.is_finite(),
                "knee forgotten after {round}"
            );
        }
        assert!(probes >= 2, "{probes} probes");
    }

    #[test]
    fn a_remeasure_that_read_slow_waits_its_interval_for_the_next() {
        // 8 workers at 100 ms; the window of the re-measure, at two thirds
        // of the level, comes out at 130 ms (noise), and half of that
        // again at 100 ms: no slower host, and the level comes back. The
        // next re-measure waits its interval (before: it was due already,
        // and the level fell again at once).
        let (mut k, mut now) = at_eight_workers();
        let mut remeasured = false;
        let mut back = None;
        for round in 0..600 {
            let slow = k.cruising().base_probe.is_some() && back.is_none();
            remeasured |= slow;
            closed_round(&mut k, 8.0, &mut now, slow.then_some(0.13));
            let c = k.cruising();
            let settled = c.base_probe.is_none() && c.verify.is_none();
            match back {
                None if remeasured && settled && k.throttle().concurrency() >= 8 => {
                    back = Some(now);
                    let reference = k.reference.mean_latency();
                    assert!(reference < 0.105, "{reference}");
                }
                None => {}
                Some(at) if now - at > BASE_INTERVAL / 2.0 => return,
                Some(at) => assert!(
                    c.base_probe.is_none(),
                    "re-measured again {:.1} s after the level came back (round {round})",
                    now - at
                ),
            }
        }
        panic!("the level never came back ({remeasured})");
    }

    #[test]
    fn a_remeasure_between_two_and_three_standard_errors_below_goes_on() {
        // 8 workers at 100 ms (answers 0.1, 0.101 and 0.102 s), then
        // answers 0.9 % quicker at the re-measure: its first window
        // lies between two and three standard errors below the reference,
        // too far to take in and too near to replace it. More answers at
        // two thirds of the level tell, and replace it (before: neither,
        // and the level came back against the reference as it was).
        let quick = 0.0991;
        let (mut k, mut now) = at_eight_workers();
        let mut started = None;
        for round in 0..600 {
            let remeasuring = k.cruising().base_probe.is_some();
            if remeasuring && started.is_none() {
                // The first window the re-measure judges: two round trips
                // at two thirds of the level (5 in flight), 10 answers.
                let mut first = Acc::default();
                for i in 0..10 {
                    first.push(quick * (1.0 + 0.01 * (i % 3) as f64), 5.0);
                }
                let t = Test::new(&first, &k.reference).unwrap();
                assert!(t.below(Z_CUT) && !t.below(Z_REBASE), "{t:?}");
                started = Some(k.reference.mean_latency());
            }
            closed_round(&mut k, 8.0, &mut now, remeasuring.then_some(quick));
            if let (Some(before), None) = (started, k.cruising().base_probe) {
                let after = k.reference.mean_latency();
                assert!(
                    after < quick * 1.01 && after < before,
                    "the reference {before} became {after} (round {round})"
                );
                return;
            }
        }
        panic!("no re-measure came and went");
    }

    #[test]
    fn a_host_that_grew_is_climbed_to_one_step_past_its_old_knee_first() {
        // 500 workers at 100 ms, then 1 000: after the probe above the knee
        // is clean twice, the level rises one request a window while below
        // 1.02 times the knee (a probe one above a knee of 500 holds a
        // queue of 0.2 % of the latency, which no window resolves), and
        // doubles its steps only beyond.
        let mut k = Adaptive::default().knee();
        let mut now = 0.0;
        let mut workers = 500.0;
        let mut knee = f64::INFINITY;
        let mut levels = Vec::new();
        for _ in 0..2000 {
            let limit = k.throttle().concurrency();
            let latency = 0.1 * (limit as f64 / workers).max(1.0);
            // The answers of a closed loop come back evenly over the round.
            for i in 0..limit {
                now += latency / limit as f64;
                let jitter = 1.0 + 0.01 * (i % 3) as f64;
                let sample = Sample::from_secs_f64(latency * jitter, StatusCode::OK);
                k.on_sample(&sample.with_in_flight(limit).with_at(now));
            }
            let c = k.cruising();
            if workers == 500.0 {
                // Until the probes above the knee found it twice.
                if c.knee.is_finite() && c.probe_every > MIN_PROBE_EVERY && c.verify.is_none() {
                    knee = c.knee;
                    workers = 1000.0;
                }
            } else if c.knee.is_infinite() && c.base_probe.is_none() && c.verify.is_none() {
                if levels.last() != Some(&k.level) {
                    levels.push(k.level);
                }
                if k.level > 1.5 * knee {
                    break;
                }
            }
        }
        assert!((490.0..=510.0).contains(&knee), "knee {knee}");
        let grown_from = k.cruising().grown_from;
        assert_eq!(grown_from, knee * GROWN_MARGIN, "{levels:?}");
        let mut doubled = false;
        for pair in levels.windows(2) {
            let step = pair[1] - pair[0];
            if pair[1] <= grown_from {
                assert!(step <= 1.0, "{pair:?} in {levels:?}");
            } else {
                doubled |= step >= 4.0;
            }
        }
        assert!(doubled, "{levels:?}");
        assert!(levels.last().unwrap() > &(1.5 * knee), "{levels:?}");
    }

    #[test]
    fn a_probe_that_found_a_queue_goes_back_to_the_level_it_left() {
        // 8 workers at 100 ms: the probe at 9 holds a queue, and its
        // latencies came out a tenth slower than Little's law says (noise),
        // so its estimate of the knee is 7.3. The level goes back to the 8
        // it left, clean window after window, not to 7 (before: 7, until
        // the next probe, 8 to 16 windows later).
        let (mut k, mut now) = at_eight_workers();
        let mut probed = false;
        for round in 0..400 {
            let limit = k.throttle().concurrency();
            if limit > 8 {
                probed = true;
            }
            let noise = if limit > 8 { 1.1 } else { 1.0 };
            let latency = 0.1 * (limit as f64 / 8.0).max(1.0) * noise;
            now += latency;
            round_trip(&mut k, latency, limit, now);
            let after = k.throttle().concurrency();
            // (Except while the no-load latency is re-measured below.)
            let remeasure = k.cruising().base_probe.is_some();
            assert!(
                after >= 8 || remeasure,
                "{after} in flight after {round} round trips"
            );
        }
        assert!(probed, "no probe above the knee");
    }

    #[test]
    fn a_run_slower_than_any_queue_of_ours_cuts_nothing() {
        // 8 workers at 100 ms, then at 1 s, answers a round trip at a time:
        // the first run of slow answers, at 8 in flight, is above the 0.8 s
        // that any queue of ours could make, so the level stays, and a
        // whole window at it becomes the reference (before: cut to 4, back
        // at 8 after 7 round trips of a second).
        let (mut k, mut now) = at_eight_workers();
        for round in 0..6 {
            now += 1.0;
            round_trip(&mut k, 1.0, 8, now);
            let limit = k.throttle().concurrency();
            assert_eq!(limit, 8, "cut to {limit} after {} rounds", round + 1);
        }
        let base = k.reference.mean_latency();
        assert!((0.95..1.05).contains(&base), "{base}");
    }

    #[test]
    fn a_due_window_at_half_waits_while_the_host_may_have_changed() {
        // 8 workers at 100 ms, then at 1 s just as the re-measure at half
        // the level comes due: a window at half, judged against the
        // reference of before, would take the change for a queue or a
        // slower host only after seconds at 4 in flight. The run of slow
        // answers is judged first, at the level (before: 4 in flight at
        // the first slow answer).
        let (mut k, mut now) = at_eight_workers();
        let due = k.cruising().base_due;
        while now + 0.1 < due {
            now += 0.1;
            round_trip(&mut k, 0.1, 8, now);
        }
        assert!(k.cruising().base_probe.is_none());
        for round in 0..6 {
            let limit = k.throttle().concurrency();
            assert!(limit >= 8, "{limit} in flight after {round} rounds");
            // (8 workers: a probe above them queues, and a reference taken
            // during one held its queue: 1.13 before it was scaled.)
            let latency = (limit as f64 / 8.0).max(1.0);
            now += latency;
            round_trip(&mut k, latency, limit, now);
        }
        let base = k.reference.mean_latency();
        assert!((0.95..1.05).contains(&base), "{base}");
    }

    #[test]
    fn a_latency_that_rose_while_the_level_halved_is_measured_again_at_half() {
        // 16 workers at 50 ms ± 10 % fell to 4. The window that cut was
        // taken while the queue still built: 16 in flight at 1.8 times the
        // reference; at half the level, 8 in flight wait twice the
        // reference. Slower at half than at the level: neither a queue nor
        // a slower host is told, and half again tells (where a slower host
        // keeps its latency and a queue of 4 workers is gone).
        let reference = spread(0.05, 0.058, 36, 15.0);
        let trigger = spread(0.0525, 0.058, 17, 16.7);
        let candidate = spread(0.092, 0.058, 10, 16.0);
        let half = spread(0.103, 0.058, 16, 7.9);
        let v = Verify {
            trigger,
            level: 15.94,
            knee: 15.94,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 7.97, half);
        k.verify(v, 10.5);
        assert_eq!(k.level, 7.97 / 2.0);
        assert_eq!(k.reference, reference, "the reference stays");
        let again = k.cruising().verify.as_deref().copied().expect("verifying");
        assert_eq!(again.deeper, Some(half));
        assert_eq!((again.level, again.knee), (15.94, 15.94));
        // Slower at half than the window before, but within the noise:
        // judged as before (here, no fall: a slower host).
        let near = spread(0.094, 0.058, 16, 7.9);
        let mut k = verifying(reference, 7.97, near);
        k.verify(v, 10.5);
        assert!(k.cruising().verify.is_none());
        assert!(k.reference.mean > reference.mean, "taken for a slower host");
    }

    #[test]
    fn a_latency_that_falls_with_the_level_was_a_queue() {
        // 256 workers at 100 ms ± 1 %. A cut from 284 left 266 in flight,
        // still 4 % slow (a queue of 10), and as drift would; the window at
        // half of that is back at the reference. The fall is a twenty-fifth
        // of the halving a latency that is all queue would show, but far
        // beyond the noise: a queue, cut from the window at 266, not a
        // slower host given its level of 284 back (which, on the
        // simulator's drop-large, went round the same cut every 0.75 s).
        let jitter = |i: u32| 1.0 + 0.01 * f64::from(i % 3);
        let (mut reference, mut candidate, mut half) =
            (Acc::default(), Acc::default(), Acc::default());
        for i in 0..2000 {
            reference.push(0.1 * jitter(i), 256.0);
        }
        for i in 0..266 {
            candidate.push(0.104 * jitter(i), 266.0);
            half.push(0.1 * jitter(i), 133.0);
        }
        let mut k = Adaptive::default().knee();
        k.phase = Phase::Cruise;
        k.reference = reference;
        k.level = 133.0;
        k.window = half;
        k.counted = 266;
        k.in_flight = 1;
        let v = Verify {
            trigger: candidate,
            level: 284.0,
            knee: 256.0,
            deeper: Some(candidate),
            more: false,
        };
        k.verify(v, 100.0);
        assert!(k.level <= 133.0, "level {}", k.level);
        assert!(
            (k.reference.mean - reference.mean).abs() < 1e-9,
            "the reference moved"
        );
        // A candidate with less than half a request queued (0.1 % slow at
        // 266 in flight), and a window at half that is quicker than both:
        // a fall, but no queue to cut; the level comes back.
        let (mut quick, mut quicker) = (Acc::default(), Acc::default());
        for i in 0..266 {
            quick.push(0.1001 * jitter(i), 266.0);
            quicker.push(0.0995 * jitter(i), 133.0);
        }
        let mut k = Adaptive::default().knee();
        k.phase = Phase::Cruise;
        k.reference = reference;
        k.level = 133.0;
        k.window = quicker;
        k.counted = 266;
        k.in_flight = 1;
        k.verify(
            Verify {
                deeper: Some(quick),
                trigger: quick,
                ..v
            },
            100.0,
        );
        assert_eq!(k.level, 284.0);
        // Noisy answers (a log spread of 0.3): a window at 32 in flight
        // that came out 3 standard errors above the reference (which is
        // how it came to be tested) and one at half of it back at the
        // reference. The fall is beyond the noise, but so is the regression
        // of a window chosen for being slow: without a queue beyond doubt
        // (five standard errors) the fall tells nothing, and the level
        // comes back.
        let spread = [-1.34, -0.45, 0.45, 1.34].map(|z| 0.3 * z);
        let noisy = |i: usize, shift: f64| (0.1_f64.ln() + shift + spread[i % 4]).exp();
        let (mut reference, mut slow, mut back) = (Acc::default(), Acc::default(), Acc::default());
        for i in 0..2000 {
            reference.push(noisy(i, 0.0), 32.0);
        }
        for i in 0..64 {
            slow.push(noisy(i, 0.12), 32.0);
        }
        for i in 0..128 {
            back.push(noisy(i, 0.0), 16.0);
        }
        let test = Test::new(&slow, &reference).unwrap();
        assert!(test.above(Z_EXIT) && !test.above(Z_SURE), "{test:?}");
        let mut k = Adaptive::default().knee();
        k.phase = Phase::Cruise;
        k.reference = reference;
        k.level = 16.0;
        k.window = back;
        k.counted = 128;
        k.in_flight = 1;
        k.verify(
            Verify {
                trigger: slow,
                level: 63.0,
                knee: 64.0,
                deeper: Some(slow),
                more: false,
            },
            100.0,
        );
        assert_eq!(k.level, 63.0);
    }

    /// Answers of log spread `sigma` (four points of a normal, in turn)
    /// about `median`, `n` of them at `in_flight`.
    fn spread(median: f64, sigma: f64, n: usize, in_flight: f64) -> Acc {
        let z = [-1.34, -0.45, 0.45, 1.34];
        let mut acc = Acc::default();
        for i in 0..n {
            acc.push((median.ln() + sigma * z[i % 4]).exp(), in_flight);
        }
        acc
    }

    /// A knee in Cruise on `reference`, at `level`, with `window` whole.
    fn verifying(reference: Acc, level: f64, window: Acc) -> Knee {
        let mut k = Adaptive::default().knee();
        k.phase = Phase::Cruise;
        k.reference = reference;
        k.level = level;
        k.counted = window.n as u64;
        k.window = window;
        k.in_flight = 1;
        k
    }

    #[test]
    fn a_window_at_half_back_at_the_reference_is_no_slower_host() {
        // A thousand workers at 400 ms ± 10 % (a log spread of 0.058).
        // A window at 723 in flight came out 0.5 % slow, three standard
        // errors above the reference (noise: 723 in flight hold no queue
        // there), and the window at half of it, 362 answers, is back at
        // the reference, 1.5 standard errors below the first: not a fall
        // that tells a queue, but nearer the reference than the first
        // window. No slower host: the reference stays (taken for one, the
        // two windows made a reference 0.4 % slow, and a queue of 4 then
        // read as clean), and the level comes back.
        let reference = spread(0.3993, 0.058, 7720, 964.0);
        let candidate = spread(0.4014, 0.058, 1446, 723.0);
        let t = Test::new(&candidate, &reference).unwrap();
        assert!(t.above(Z_EXIT) && !t.above(Z_SURE), "{t:?}");
        let window = spread(0.3994, 0.058, 362, 361.5);
        let t = Test::new(&window, &candidate).unwrap();
        assert!(!t.below(Z_CUT), "{t:?}");
        let v = Verify {
            trigger: candidate,
            level: 964.0,
            knee: 964.0,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 361.5, window);
        k.verify(v, 100.0);
        assert_eq!(k.level, 964.0);
        assert_eq!(k.reference, reference);
        // A window at half that stays where the first one was is a slower
        // host, as before.
        let mut k = verifying(reference, 361.5, spread(0.4014, 0.058, 362, 361.5));
        k.verify(v, 100.0);
        assert_eq!(k.level, 964.0);
        assert!(
            k.reference.mean > reference.mean + 0.004,
            "{:?}",
            k.reference
        );
        // So is one of fewer answers than a reference replaced takes (16
        // workers at 40 ms, a reference of 16 answers, windows at 16 and
        // 15 in flight 8 % and 5 % slower, and 8 answers at half): it
        // tells too little to hold a reference of a few answers against
        // two windows of more.
        let reference = spread(0.0395, 0.04, 16, 16.0);
        let trigger = spread(0.0426, 0.04, 17, 16.5);
        let candidate = spread(0.0414, 0.04, 15, 14.7);
        let mut k = verifying(reference, 7.55, spread(0.0393, 0.04, 8, 7.4));
        k.verify(
            Verify {
                trigger,
                level: 17.27,
                knee: 17.0,
                deeper: Some(candidate),
                more: false,
            },
            100.0,
        );
        assert_eq!(k.level, 17.27);
        assert!(k.reference.n > 16.0, "{:?}", k.reference);
    }

    #[test]
    fn a_few_answers_at_half_wait_for_more_against_a_reference_of_more() {
        // 16 workers at 50 ms ± 10 % (a log spread of 0.058), a reference
        // of 52 answers. A raise to 17.5 held a queue (55.1 ms, 18
        // answers), the cut to 15.2 still read 52.4 ms (15 answers), and 8
        // answers at half of that came back at 50.9 ms: nearer the
        // reference, but fewer than replacing one takes. Against a
        // reference of more answers than both windows above it, they wait
        // for more (before: a slower host at once, a reference made of the
        // two windows at 15.2 and 7.6, 51.9 ms, and against it every probe
        // at 17 read clean: drop, seed 9, never settled after the
        // recovery).
        let reference = spread(0.0506, 0.058, 52, 16.0);
        let trigger = spread(0.0551, 0.058, 18, 17.4);
        let candidate = spread(0.0524, 0.058, 15, 15.2);
        let v = Verify {
            trigger,
            level: 15.24,
            knee: 15.24,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 7.62, spread(0.0509, 0.058, 8, 7.6));
        k.verify(v, 100.0);
        assert_eq!(k.level, 7.62);
        assert_eq!(k.reference, reference);
        let waiting = k.cruising_mut().verify.take().expect("still verifying");
        // Sixteen answers there: no slower host. The reference stays, and
        // the level comes back.
        k.window = spread(0.0508, 0.058, 16, 7.6);
        k.counted = 16;
        k.verify(*waiting, 100.2);
        assert_eq!(k.level, 15.24);
        assert_eq!(k.reference, reference);
        assert!(k.cruising().verify.is_none());
    }

    #[test]
    fn an_answer_at_the_instant_a_window_closed_belongs_by_its_dispatch_number() {
        // The window closed at 0.199 s, its 100th dispatch the last sent in
        // it, with two of its requests still out. An answer freed a place
        // at that instant, and request 101 went out after the close: its
        // quick answer (5 ms) comes back first, with a send time that the
        // subtraction `at - latency` puts a rounding error before the
        // close (as on the simulator's paused clock).
        let closed = |k: &mut Knee| {
            k.level_since = 0.1;
            k.since_seq = 80;
            k.closed = Some(Closed {
                at: 0.199,
                seq: 100,
                left: 2,
                deadline: 1.0,
            });
        };
        let sent = 0.204 - 0.005;
        assert!(sent < 0.199, "the rounding this test is about: {sent}");
        let mut k = verifying(spread(0.05, 0.058, 40, 8.0), 8.0, Acc::default());
        closed(&mut k);
        // By its dispatch number, it is the next window's: the two still
        // out are waited for.
        assert_eq!(k.belongs(sent, 0.204, 101), Belongs::Next);
        assert_eq!(k.closed.map(|c| c.left), Some(2));
        // One sent before the close, at the same instant, is the window's.
        assert_eq!(k.belongs(0.199, 0.25, 100), Belongs::Window);
        assert_eq!(k.closed.map(|c| c.left), Some(1));
        // Before the window opened: stale, and no longer out.
        k.old = 3;
        assert_eq!(k.belongs(0.15, 0.26, 80), Belongs::Stale);
        assert_eq!(k.old, 2);
        // Without dispatch numbers, the send time decides, and the quick
        // answer stands for one of the window's slow ones still out.
        let mut k = verifying(spread(0.05, 0.058, 40, 8.0), 8.0, Acc::default());
        closed(&mut k);
        assert_eq!(k.belongs(sent, 0.204, 0), Belongs::Window);
        assert_eq!(k.closed.map(|c| c.left), Some(1));
    }

    #[test]
    fn a_raised_startup_window_begins_after_the_request_the_raising_answer_frees() {
        // A closed loop at 2 in flight, 100 ms a request, every answer
        // freeing a place that the next request takes at the same
        // instant. The answer that raises the level frees one more: that
        // request goes out with the old level in flight, and is stale.
        let drive = |ordered: bool| {
            let mut k = Adaptive::default().knee();
            let mut out: std::collections::VecDeque<(u64, f64)> =
                (1..=2).map(|s| (s, 0.0)).collect();
            let mut dispatched = 2;
            for _ in 0..40 {
                let (seq, sent) = out.pop_front().expect("two out");
                let now = sent + 0.1;
                let before = k.level;
                let sample = at(0.1, out.len() + 1, now);
                let sample = if ordered {
                    sample.with_order(seq, dispatched)
                } else {
                    sample
                };
                k.on_sample(&sample);
                if k.level != before {
                    return (k, dispatched, now);
                }
                while out.len() < k.limit() {
                    dispatched += 1;
                    out.push_back((dispatched, now));
                }
            }
            panic!("never raised");
        };
        let (k, dispatched, now) = drive(true);
        assert_eq!(k.phase, Phase::Startup);
        assert_eq!(k.since_seq, dispatched + 1);
        assert_eq!(k.old, k.in_flight as u64);
        assert_eq!(k.level_since, now);
        // Without dispatch numbers: the requests sent from the answer's
        // instant on, as before.
        let (k, _, now) = drive(false);
        assert_eq!(k.since_seq, 0);
        assert_eq!(k.old, k.in_flight.saturating_sub(1) as u64);
        assert_eq!(k.level_since, now);
    }

    #[test]
    fn a_window_that_waits_for_more_keeps_the_answers_that_came_while_it_was_closed() {
        // As above: 8 answers at half, nearer the reference than a
        // reference of more answers, wait for more. The window had closed
        // on its last requests out, and 4 answers to requests sent after
        // it closed (quicker: sent later, back sooner) came meanwhile:
        // they are the reopened window's (dropped, it kept only the
        // slower answers that came first, and read slow).
        let reference = spread(0.0506, 0.058, 52, 16.0);
        let v = Verify {
            trigger: spread(0.0551, 0.058, 18, 17.4),
            level: 15.24,
            knee: 15.24,
            deeper: Some(spread(0.0524, 0.058, 15, 15.2)),
            more: false,
        };
        let first = spread(0.0509, 0.058, 8, 7.6);
        let mut k = verifying(reference, 7.62, first);
        k.closed = Some(Closed {
            at: 99.9,
            seq: 0,
            left: 0,
            deadline: 100.5,
        });
        let quick = spread(0.0500, 0.058, 4, 7.6);
        k.after = Some(Box::new(Next {
            window: quick,
            max_in_flight: 8,
            sends: Sends {
                first: 99.92,
                last: 99.98,
                n: 4.0,
            },
            slowest: 0.06,
            counted: 4,
            refused: 0,
        }));
        k.verify(v, 100.0);
        assert_eq!(k.level, 7.62);
        assert!(k.cruising().verify.is_some(), "still verifying");
        assert!(k.closed.is_none() && k.after.is_none());
        let mut both = first;
        both.merge(&quick);
        assert_eq!(k.window, both);
        assert_eq!((k.counted, k.max_in_flight, k.slowest), (12, 8, 0.06));
        assert_eq!(
            (k.sends.first, k.sends.last, k.sends.n),
            (99.92, 99.98, 4.0)
        );
    }

    #[test]
    fn a_fall_at_half_from_a_window_not_beyond_doubt_above_is_no_queue() {
        // 8 workers at 1 s, log-normal σ 0.8, a reference of 24 answers.
        // The re-measure at two thirds of the level (5.33 in flight: no
        // queue on 8 workers) read 2.3 standard errors above it, by noise,
        // and the window at half of that came back 2.4 standard errors
        // below it, near the reference. The fall is one a window chosen
        // for being slow makes by regression alone: without a queue
        // beyond doubt in the first window, it is no queue, and the level
        // comes back (before: a cut to the first window's capacity, 1.33
        // in flight, where it stayed for 110 s: w8-1000ms-ln0.8, seed 1,
        // 37 % of the oracle).
        let reference = spread((-0.468_f64).exp(), 0.8, 24, 1.0);
        let candidate = spread(0.1_f64.exp(), 0.8, 20, 5.33);
        let t = Test::new(&candidate, &reference).unwrap();
        assert!(t.above(Z_CUT) && !t.above(Z_SURE), "{t:?}");
        let window = spread((-0.45_f64).exp(), 0.8, 32, 2.67);
        let t = Test::new(&window, &candidate).unwrap();
        assert!(t.below(Z_CUT), "{t:?}");
        assert!(window.mean < candidate.mean - std::f64::consts::LN_2 / 2.0);
        let v = Verify {
            trigger: candidate,
            level: 8.0,
            knee: 8.0,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 2.67, window);
        k.verify(v, 100.0);
        assert_eq!(k.level, 8.0);
        assert_eq!(k.reference, reference);
    }

    #[test]
    fn a_window_at_half_far_below_the_reference_replaces_it_first() {
        // One worker at 1 s, log-normal σ 0.8: Startup's short rounds at 2
        // and 4 in flight made a reference of 12 answers with a queue in
        // it (2.3 s). The re-measure at 2.67 read above it (5.8 s, 12
        // answers: 2.8 standard errors, not beyond doubt), and 32 answers
        // at half of that came back at 0.94 s, 3.5 standard errors below
        // the reference: it held a queue. The window replaces it, and
        // against it the re-measure held a queue beyond doubt: a cut, not
        // the level of 4 back on one worker (before: a standing queue of
        // 2.3 for 100 s, w1-1000ms-ln0.8, seed 4).
        let reference = spread(0.842_f64.exp(), 0.8, 12, 2.0);
        let candidate = spread(1.75_f64.exp(), 0.8, 12, 2.67);
        let window = spread((-0.063_f64).exp(), 0.8, 32, 1.33);
        let t = Test::new(&candidate, &reference).unwrap();
        assert!(t.above(Z_CUT) && !t.above(Z_SURE), "{t:?}");
        let t = Test::new(&window, &reference).unwrap();
        assert!(t.below(Z_REBASE), "{t:?}");
        let v = Verify {
            trigger: candidate,
            level: 4.0,
            knee: 4.0,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 1.33, window);
        k.verify(v, 100.0);
        assert_eq!(k.reference, window);
        assert!(k.level <= 1.33, "level {}", k.level);
    }

    #[test]
    fn a_slower_host_seen_at_half_completes_its_reference_at_two_thirds() {
        // 8 workers at 100 ms, then 1 s: a cut to 4 in flight, and at half
        // of it 4 answers at 1 s, beyond what any queue of ours explains
        // (Little's law: at most 4 × 100 ms). Fewer than a reference
        // takes: the rest come at two thirds of the level to come back
        // to, 5.33 (before: at 4, a third longer to gather at a third
        // less throughput; drift-up, seed 13: 85 -> 87 % of the oracle).
        let reference = spread(0.1, 0.058, 64, 8.0);
        let mut k = verifying(reference, 4.0, spread(1.0, 0.058, 4, 4.0));
        k.slower(8.0, 8.0, 100.0);
        assert!(
            (k.level - 8.0 * BASE_GAIN).abs() < 1e-12,
            "level {}",
            k.level
        );
        let v = k.cruising().verify.as_deref().copied().expect("verifying");
        assert!(v.more && v.level == 8.0 && v.deeper.is_some_and(|d| d.n == 4.0));
        // Seen at the level itself, the rest come there.
        let mut k = verifying(reference, 8.0, spread(1.0, 0.058, 4, 8.0));
        k.slower(8.0, 8.0, 100.0);
        assert_eq!(k.level, 8.0);
    }

    #[test]
    fn two_windows_above_the_reference_and_a_fall_at_half_are_a_queue() {
        // A thousand workers at 1 s ± 10 %: a raise to 1 030 cut to 1 010
        // (its window 1.4 % slow), and the window at 1 010 still 0.9 %
        // slow (a queue of 10, 4.6 standard errors: not beyond doubt),
        // then the one at half of it back at the reference, 3 standard
        // errors below. Two windows in a row above the reference are a
        // queue: the cut stands, and the reference with it (taken for a
        // slower host, both windows made the reference and the level of
        // 1 030 came back: the queue of 10 then read as clean for 50 s).
        let reference = spread(1.0002, 0.058, 4096, 998.0);
        let trigger = spread(1.0136, 0.058, 536, 1029.2);
        let candidate = spread(1.0096, 0.058, 1011, 1010.5);
        let t = Test::new(&candidate, &reference).unwrap();
        assert!(t.above(Z_EXIT) && !t.above(Z_SURE), "{t:?}");
        let v = Verify {
            trigger,
            level: 1030.0,
            knee: 1015.0,
            deeper: Some(candidate),
            more: false,
        };
        let mut k = verifying(reference, 505.3, spread(1.0, 0.058, 505, 504.5));
        k.verify(v, 100.0);
        assert!(k.level <= 505.3, "level {}", k.level);
        assert_eq!(k.reference, reference);
        // The window that cut alone, at half back at the reference: not
        // sure enough of a queue to cut; the level comes back.
        let mut k = verifying(reference, 505.3, spread(1.0, 0.058, 505, 504.5));
        k.verify(
            Verify {
                trigger: candidate,
                ..v
            },
            100.0,
        );
        assert_eq!(k.level, 1030.0);
        assert_eq!(k.reference, reference);
    }

    #[test]
    fn two_percent_of_random_errors_make_no_event() {
        // Page's CUSUM between 2 % and 8 %: one overload in 50 answers,
        // for 100 000 answers, never crosses ln 1000.
        let mut k = Adaptive::default().knee();
        for i in 1..=100_000u32 {
            k.count(i % 50 == 0);
            assert!(k.events().cusum < H_EVENT, "event after {i} answers");
        }
        // One in ten does, within about 70 answers.
        let mut k = Adaptive::default().knee();
        let n = (1..=1000u32).find(|i| {
            k.count(i % 10 == 0);
            k.events().cusum >= H_EVENT
        });
        assert!(n.is_some_and(|n| n <= 150), "{n:?}");
    }

    #[test]
    fn random_errors_leave_the_level_where_latency_puts_it() {
        let mut clean = Adaptive::default().knee();
        let mut noisy = Adaptive::default().knee();
        let a = run(&mut clean, 32.0, 0.1, 60, 0, 0.0);
        let b = run(&mut noisy, 32.0, 0.1, 60, 50, 0.0);
        let (a, b) = (a[59], b[59]);
        assert!((30..=34).contains(&a), "{a}");
        assert!(b as f64 >= 0.8 * a as f64, "{b} of {a}");
    }

    #[test]
    fn errors_that_grow_with_load_cut_to_what_was_served() {
        // A tenth of answers refused: the level goes to what was served.
        let mut k = Adaptive::default().knee();
        run(&mut k, 64.0, 0.1, 30, 0, 0.0);
        let before = k.level;
        run(&mut k, 64.0, 0.1, 3, 10, 0.0);
        assert!(k.level < before, "{} from {before}", k.level);
        assert!(k.level >= BETA * before - 1.0, "{} from {before}", k.level);
    }

    /// A server of the closed-loop harness ([`closed_loop`]).
    trait TestServer {
        /// A request sent at `at`, with the answers still out: when its
        /// answer comes, and whether it is a success.
        fn send(&mut self, at: f64, out: &[(f64, bool)]) -> (f64, bool);
        /// The sample of an answer at `at`, a success or not, with
        /// `in_flight` requests out (itself included), and the time before
        /// which nothing may be sent (a `Retry-After` pause, obeyed as the
        /// layer does).
        fn answer(&mut self, at: f64, ok: bool, in_flight: usize) -> (Sample, f64);
    }

    /// A client that sends whenever the throttle lets it (a send takes a
    /// tenth of a millisecond), for `secs` seconds. Returns the successes
    /// to requests sent after `warm` seconds, and the refused and sent
    /// counts over the whole run.
    fn closed_loop(
        k: &mut Knee,
        server: &mut impl TestServer,
        secs: f64,
        warm: f64,
    ) -> (u64, u64, u64) {
        // The time of the latest answer: no request goes out before it.
        let (mut now, mut paused) = (0.0_f64, f64::NEG_INFINITY);
        let mut out: Vec<(f64, bool)> = Vec::new();
        let (mut last_send, mut ok_late, mut refused, mut sent) = (f64::NEG_INFINITY, 0, 0, 0);
        loop {
            let throttle = k.throttle();
            let mut next = last_send + throttle.delay().as_secs_f64().max(1e-4);
            out.sort_by(|a, b| a.0.total_cmp(&b.0));
            if out.len() >= throttle.concurrency() {
                next = next.max(out[0].0);
            }
            next = next.max(now).max(paused);
            if let Some(&(at, ok)) = out.first().filter(|a| a.0 <= next) {
                out.remove(0);
                now = now.max(at);
                let (sample, until) = server.answer(at, ok, out.len() + 1);
                paused = paused.max(until);
                k.on_sample(&sample);
                continue;
            }
            if next > secs {
                return (ok_late, refused, sent);
            }
            last_send = next;
            sent += 1;
            let (at, ok) = server.send(next, &out);
            if !ok {
                refused += 1;
            } else if next >= warm {
                ok_late += 1;
            }
            out.push((at, ok));
        }
    }

    /// A token bucket of `rate` per second (burst `burst`) that refuses at
    /// once beyond it, and serves the rest in `latency`: 503 without
    /// `Retry-After`, or with `retry_after`, 429 and `Retry-After` in whole
    /// seconds (the time until a token, at least 1).
    struct Bucket {
        rate: f64,
        burst: f64,
        latency: f64,
        retry_after: bool,
        tokens: f64,
        refill: f64,
    }

    impl TestServer for Bucket {
        fn send(&mut self, at: f64, _out: &[(f64, bool)]) -> (f64, bool) {
            self.tokens = (self.tokens + (at - self.refill) * self.rate).min(self.burst);
            self.refill = at;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                (at + self.latency, true)
            } else {
                (at, false)
            }
        }

        fn answer(&mut self, at: f64, ok: bool, in_flight: usize) -> (Sample, f64) {
            let status = if ok {
                StatusCode::OK
            } else if self.retry_after {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let took = if ok { self.latency } else { 0.0 };
            let sample = Sample::from_secs_f64(took, status)
                .with_in_flight(in_flight)
                .with_at(at);
            if !ok && self.retry_after {
                let wait = ((1.0 - self.tokens) / self.rate).ceil().max(1.0);
                (sample.with_pause(wait), at + wait)
            } else {
                (sample, f64::NEG_INFINITY)
            }
        }
    }

    /// [`closed_loop`] against a [`Bucket`].
    fn bucket_server(
        k: &mut Knee,
        rate: f64,
        burst: f64,
        latency: f64,
        secs: f64,
        warm: f64,
        retry_after: bool,
    ) -> (u64, u64, u64) {
        let mut bucket = Bucket {
            rate,
            burst,
            latency,
            retry_after,
            tokens: burst,
            refill: 0.0,
        };
        closed_loop(k, &mut bucket, secs, warm)
    }

    /// Five minutes against each bucket `(rate, burst, latency)`: after the
    /// first minute its rate is served within a tenth, and under 2 % of
    /// all the requests were refused.
    /// A fresh slot behind a token bucket for five minutes: the share of
    /// the rate served after the first minute, and the requests refused of
    /// those sent.
    fn rate_kept(rate: f64, burst: f64, latency: f64, retry_after: bool) -> (f64, u64, u64) {
        let mut k = Adaptive::default().knee();
        let (ok, refused, sent) =
            bucket_server(&mut k, rate, burst, latency, 300.0, 60.0, retry_after);
        (ok as f64 / 240.0 / rate, refused, sent)
    }

    fn keeps_the_rate(buckets: &[(f64, f64, f64)], retry_after: bool) {
        for &(rate, burst, latency) in buckets {
            let (late, refused, sent) = rate_kept(rate, burst, latency, retry_after);
            assert!(
                late >= 0.9,
                "{rate}/s (burst {burst}) at {latency} s: {late} of the rate after a minute"
            );
            let share = refused as f64 / sent as f64;
            assert!(
                share < 0.02,
                "{rate}/s (burst {burst}) at {latency} s: {refused} of {sent} refused"
            );
        }
    }

    #[test]
    fn a_rate_limit_without_retry_after_is_found_and_kept() {
        // nginx's limit_req (nodelay): 503 at once beyond the rate, no
        // `Retry-After`. After a minute the host's rate is served within a
        // tenth, and over the five minutes under 2 % were refused. (Met:
        // 20/s (burst 5) at 20 ms, 5/s (burst 2) at 50 ms, with a burst of
        // 5 20/s at 1 ms and 50/s at 5 ms, and where the rate limit binds
        // above one request in flight, 10/s at 200 ms. Missed: 2/s (burst
        // 5) at 100 ms, 3.1 % refused. The fast ones met since the share
        // served is the ceiling after an event, fa3e294: before, 3.8 to
        // 4.2 % refused. Not asserted: 100/s (burst 20) at 2 ms, which
        // settles at the bucket's rate exactly, where the rounding of a
        // division decides: 1.0 % refused, but 2.1 % with a no-load latency
        // lower by a part in 10¹⁵ or 10¹²; and one case of the grid below
        // alone, 20/s (burst 5) at 300 ms, which its timing decides: 0.96 of
        // the rate at 6ec42e6, 0.88 when a re-measure a little shorter moved
        // a probe above the ceiling by a second and its second event cut
        // below the rate, where the grid as a whole gained.)
        keeps_the_rate(
            &[
                (20.0, 5.0, 0.02),
                (5.0, 2.0, 0.05),
                (20.0, 5.0, 0.001),
                (50.0, 5.0, 0.005),
                (10.0, 5.0, 0.2),
            ],
            false,
        );
    }

    #[test]
    fn rate_limits_on_a_grid_are_found_and_kept() {
        // Token buckets of 5, 10, 20 and 50 requests a second, bursts of 2
        // and 5, latencies of 20 ms to 500 ms, refused with and without
        // `Retry-After`: 80 cases, each met when after a minute the rate is
        // served within a tenth and under 2 % of the requests were refused
        // (as above). One case alone turns on the timing of one probe; the
        // grid tells whether a change helps rate limits as a whole. (42 of
        // 80 met at 6ec42e6. The misses: rates that bind above one request
        // in flight at long latencies, where each re-measure below the
        // level and each probe above the ceiling costs a share of the rate
        // for seconds, and with `Retry-After`, 50/s at 100 ms and above.)
        // `cargo test --release --lib -- rate_limits_on_a_grid --nocapture`
        // prints every case.
        let mut met = 0;
        let mut missed = Vec::new();
        for retry_after in [false, true] {
            for rate in [5.0, 10.0, 20.0, 50.0] {
                for burst in [2.0, 5.0] {
                    for latency in [0.02, 0.1, 0.2, 0.3, 0.5] {
                        let (late, refused, sent) = rate_kept(rate, burst, latency, retry_after);
                        let share = refused as f64 / sent as f64;
                        println!(
                            "retry-after {retry_after}, {rate}/s (burst {burst}) at {latency} s: \
                             {late:.3} of the rate, {:.2} % refused",
                            100.0 * share
                        );
                        if late >= 0.9 && share < 0.02 {
                            met += 1;
                        } else {
                            missed.push((retry_after, rate, burst, latency, late, share));
                        }
                    }
                }
            }
        }
        assert!(met >= 42, "{met} of 80 met; missed: {missed:?}");
    }

    #[test]
    fn a_token_bucket_behind_retry_after_is_measured_and_kept() {
        // 429 with `Retry-After` beyond a token bucket's rate. Two episodes
        // between pauses, at one level, of different lengths tell the rate,
        // and the slot keeps to it: after a minute the rate is served within
        // a tenth, and under 2 % of the requests were refused. (On the grid
        // of rates 2, 5, 20, 100, 400/s, bursts 1, 5, 20 and latencies 2,
        // 20, 100 ms, 23 of 45 meet this, against 13 before the bucket was
        // measured. Missed: a burst of 1, where an episode passes one
        // request and tells nothing, in 10 of 15; at 2/s, a pause's share
        // of so few requests, 1.5 to 3.9 % refused; and where the rate
        // binds above one request in flight, 100/s at 100 ms (0.55), 400/s
        // at 20 and 100 ms (0.61, 0.49), 100/s and 400/s with a burst of 20
        // at 2 ms (0.22 and 0.07 of the rate, 4.4 and 3.6 % refused).)
        keeps_the_rate(
            &[
                (2.0, 5.0, 0.1),
                (5.0, 5.0, 0.02),
                (5.0, 20.0, 0.1),
                (20.0, 5.0, 0.02),
                (20.0, 20.0, 0.1),
                (100.0, 5.0, 0.002),
                (100.0, 20.0, 0.02),
                (400.0, 5.0, 0.002),
                (400.0, 20.0, 0.02),
            ],
            true,
        );
    }

    #[test]
    fn two_episodes_tell_the_bucket() {
        // 20/s, burst 5: an episode of 0.3 s passes 5 + 6 = 11 requests,
        // one of 1.3 s passes 5 + 26 = 31.
        let mut k = Adaptive::default().knee();
        let episode = |k: &mut Knee, n: u64, t: f64| {
            k.events_mut().resumed = 10.0;
            k.events_mut().resumed_level = k.level;
            k.resumed_served = n;
            k.in_flight = 1;
            k.bucket_rate(10.0 + t)
        };
        assert_eq!(episode(&mut k, 11, 0.3), None, "one episode tells nothing");
        let r = episode(&mut k, 31, 1.3).expect("two episodes tell the rate");
        assert!((r - 20.0).abs() < 1e-9, "{r}");
        // Too close in count: one request of error would be a tenth.
        assert_eq!(episode(&mut k, 15, 0.5), None);
        // A count that grows no faster than time: no bucket (B <= 0).
        let mut q = Adaptive::default().knee();
        assert_eq!(episode(&mut q, 10, 0.5), None);
        assert_eq!(episode(&mut q, 30, 1.5), None);
        // An episode at a level that changed during it tells nothing.
        let mut c = Adaptive::default().knee();
        assert_eq!(episode(&mut c, 11, 0.3), None);
        c.events_mut().resumed = 10.0;
        c.events_mut().resumed_level = c.level + 1.0;
        c.resumed_served = 31;
        assert_eq!(c.bucket_rate(11.3), None);
        // One that passed nothing (a server refusing everything) starts
        // the count afresh.
        assert_eq!(episode(&mut c, 0, 0.1), None);
        assert_eq!(episode(&mut c, 31, 1.3), None);
    }

    /// A controller in Cruise whose no-load latency is `latency`, from 20
    /// answers.
    fn cruising(latency: f64) -> Knee {
        let mut k = Adaptive::default().knee();
        for _ in 0..20 {
            k.reference.push(latency, 1.0);
        }
        k.phase = Phase::Cruise;
        k
    }

    #[test]
    fn a_rate_keeps_its_spacing_when_the_latency_is_measured_afresh() {
        // At 2 ms, a level of 0.04 is one request every 50 ms (20/s).
        let mut k = cruising(0.002);
        k.set_level(0.04, 1.0);
        assert!((k.delay - 0.05).abs() < 1e-9, "{}", k.delay);
        // Quicker answers bring the no-load latency down to about 0.6 ms:
        // the rate limit behind the slot has not moved, nor does its
        // spacing, now or at the next level.
        for _ in 0..200 {
            k.reference.push(0.0005, 1.0);
        }
        assert!(k.base().unwrap() < 0.001);
        k.pace();
        assert!((k.delay - 0.05).abs() < 1e-9, "{}", k.delay);
        k.set_level(0.05, 2.0);
        assert!((k.delay - 0.04).abs() < 1e-9, "{}", k.delay);
        // Above a rate the level counts requests in flight, whatever the
        // latency; back at a rate, the unit is the latency then.
        k.set_level(2.0, 3.0);
        assert!(k.rate_unit.is_nan());
        k.set_level(0.05, 4.0);
        assert_eq!(k.rate_unit, k.base().unwrap());
        assert!((k.delay - k.base().unwrap() / 0.05).abs() < 1e-12);
    }

    #[test]
    fn a_run_refused_whole_at_a_rate_cuts_by_the_rule_of_succession() {
        // At a rate of 0.5 (500 requests a second at 1 ms), five answers
        // in a row refused: none of 5 served, so a seventh of the level,
        // and raises free up to three fifths of it.
        // (Five 503s answered in 0.1 ms, `gap` apart from 1.1 s.)
        let refused = |k: &mut Knee, gap: f64, in_flight: usize| {
            for i in 0..5 {
                let sample = Sample::from_secs_f64(0.0001, StatusCode::SERVICE_UNAVAILABLE)
                    .with_in_flight(in_flight)
                    .with_at(1.1 + gap * f64::from(i));
                k.on_sample(&sample);
            }
        };
        let mut k = cruising(0.001);
        k.set_level(0.5, 1.0);
        refused(&mut k, 0.002, 1);
        assert!((k.level - 0.5 / 7.0).abs() < 1e-12, "{}", k.level);
        assert!(
            (k.events().err_ceiling - 0.3).abs() < 1e-12,
            "{}",
            k.events().err_ceiling
        );
        // Above a rate the same run cuts by β at most: the refusals may
        // have outrun successes still being served.
        let mut c = cruising(0.001);
        c.set_level(4.0, 1.0);
        refused(&mut c, 0.0001, 4);
        assert!((c.level - BETA * 4.0).abs() < 1e-12, "{}", c.level);
    }

    #[test]
    fn a_rate_limit_is_found_from_far_above_with_few_refusals() {
        // A client that starts at 2 in flight against a millisecond's
        // latency sends thousands of requests a second. Behind nginx's
        // limit_req (503 at once beyond the rate, no `Retry-After`), at
        // most 30 are refused in the first 30 s. (53, 37, 44 and 62 when
        // each event below one in flight cut by β at most.)
        for (rate, burst, latency) in [
            (20.0, 5.0, 0.0003),
            (20.0, 5.0, 0.001),
            (50.0, 5.0, 0.0003),
            (10.0, 5.0, 0.0003),
        ] {
            let mut k = Adaptive::default().knee();
            let (_, refused, sent) = bucket_server(&mut k, rate, burst, latency, 30.0, 0.0, false);
            assert!(
                refused <= 30,
                "{rate}/s (burst {burst}) at {latency} s: {refused} of {sent} refused"
            );
        }
    }

    #[test]
    fn a_probe_after_a_pause_pays_for_the_pause() {
        // At a rate of 0.4 (20 requests per second at 20 ms) below a
        // ceiling a pause of 1 s set: that pause kept 20 answers from being
        // sent, so with the overload itself the next probe waits for
        // 21 / 0.5 % = 4 200 answers, not 200.
        let mut k = cruising(0.02);
        k.level = 0.4;
        k.events_mut().err_ceiling = 0.4;
        k.events_mut().err_hi = 0.5;
        k.events_mut().last_event = 0.0;
        k.events_mut().event_errors = 1;
        k.events_mut().event_pause = 1.0;
        let at = 100.0;
        k.answers_since_event = 4_000;
        k.raise(at);
        assert_eq!(k.level, 0.4, "probed after 4 000 answers");
        k.answers_since_event = 4_200;
        k.raise(at);
        assert!(k.level > 0.4, "no probe after 4 200 answers");
    }

    #[test]
    fn probes_wait_until_all_events_are_paid() {
        // At its ceiling after an event of 2 overloads (a budget of 400
        // answers), but 16 refused at the start: no probe until those are
        // within 0.5 % of all answers too (3 000 answers, plus one).
        let mut k = cruising(0.02);
        k.level = 0.4;
        let events = k.events_mut();
        events.err_ceiling = 0.4;
        events.err_hi = 0.8;
        events.last_event = 0.0;
        events.event_errors = 2;
        events.event_overloads = 16;
        events.answers_all = 2_000;
        k.answers_since_event = 1_000;
        k.raise(100.0);
        assert_eq!(k.level, 0.4, "probed at 16 overloads of 2 000 answers");
        k.events_mut().answers_all = 3_000;
        k.raise(100.0);
        assert!(k.level > 0.4, "no probe at 16 overloads of 3 000 answers");
    }

    #[test]
    fn a_pause_before_anything_was_served_changes_only_the_wait() {
        let mut k = Adaptive::default().knee();
        let sample = Sample::from_secs_f64(0.01, StatusCode::TOO_MANY_REQUESTS)
            .with_pause(1.0)
            .with_in_flight(2)
            .with_at(0.01);
        let t = k.on_sample(&sample);
        assert_eq!(t.concurrency(), 2);
        // Served, then paused: the level comes down.
        run(&mut k, 64.0, 0.1, 20, 0, 0.0);
        let before = k.level;
        run(&mut k, 64.0, 0.1, 1, 7, 1.0);
        assert!(k.level < before, "{} from {before}", k.level);
        assert!(k.events().err_ceiling < before);
    }

    #[test]
    fn a_window_waits_for_its_slow_answers() {
        let mut k = Adaptive::default().knee();
        k.in_flight = 5;
        k.open_window(10.0);
        assert_eq!(k.old, 4);
        // Four sent before it opened come back, then three of its own: the
        // two still out of its five keep it open.
        for _ in 0..4 {
            k.in_flight = 6;
            assert_eq!(k.belongs(9.0, 10.5, 0), Belongs::Stale);
        }
        assert_eq!(k.old, 0);
        for _ in 0..3 {
            k.in_flight = 5;
            assert_eq!(k.belongs(10.5, 11.0, 0), Belongs::Window);
        }
        // (Its slowest answer took a second: it waits two at most.)
        k.slowest = 1.0;
        assert!(!k.complete(5.0, 11.0));
        assert_eq!(k.closed.map(|c| c.left), Some(4));
        // Requests sent after it closed belong to the next window.
        k.in_flight = 5;
        assert_eq!(k.belongs(11.5, 12.0, 0), Belongs::Next);
        for left in (0..4).rev() {
            k.in_flight = left + 2;
            assert_eq!(k.belongs(10.9, 11.4, 0), Belongs::Window);
            assert_eq!(k.complete(5.0, 12.0), left == 0);
        }
        // Cancelled requests never answer: the deadline judges it.
        k.in_flight = 5;
        k.open_window(20.0);
        k.slowest = 1.0;
        k.in_flight = 9;
        assert_eq!(k.belongs(20.5, 21.0, 0), Belongs::Window);
        assert!(!k.complete(4.0, 21.0));
        assert!(!k.complete(4.0, 22.9));
        assert!(k.complete(4.0, 23.0));
    }

    #[test]
    fn ignored_and_zero_samples_change_nothing() {
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        let before = p.throttle();
        p.on_sample(&Sample::error(1.0, Outcome::Ignore));
        p.on_sample(&at(0.0, 1, 1.0));
        p.on_sample(&at(f64::NAN, 1, 1.0));
        assert_eq!(p.throttle(), before);
    }

    #[test]
    fn counts_in_flight_up_to_usize_max_do_not_overflow() {
        // Found by tests/hostile.rs in a debug build: a window's count plus
        // usize::MAX - 1 still out overflowed.
        // The sequence proptest shrank it to.
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        let overload = || Sample::error(0.0, Outcome::Overload);
        let served = |latency: f64, in_flight: usize| {
            Sample::from_secs_f64(latency, StatusCode::CONTINUE).with_in_flight(in_flight)
        };
        let mut samples = vec![overload(), served(f64::MAX, 0)];
        samples.extend((0..4).map(|_| served(0.0, 0)));
        samples.extend((0..3).map(|_| overload()));
        samples.push(served(0.0, 0));
        samples.extend((0..2).map(|_| overload()));
        samples.extend((0..2).map(|_| served(f64::MAX, 0)));
        samples.push(served(f64::MAX, usize::MAX));
        for sample in &samples {
            assert!(p.on_sample(sample).concurrency() >= 1);
        }
    }

    #[test]
    fn the_start_delay_is_raised_to_the_minimum() {
        let p = Adaptive::default()
            .min_delay_secs(0.5)
            .make_policy(&SlotKey::new("t"));
        assert_eq!(p.throttle().delay_secs(), 0.5);
    }

    #[test]
    fn validation() {
        assert_eq!(
            Adaptive::default()
                .initial_concurrency(100)
                .max_concurrency(10)
                .validate()
                .unwrap_err()
                .field(),
            "initial_concurrency"
        );
        assert_eq!(
            Adaptive::default()
                .max_concurrency(0)
                .validate()
                .unwrap_err()
                .field(),
            "max_concurrency"
        );
        assert!(Adaptive::default().validate().is_ok());
    }

    #[test]
    fn an_episode_counts_what_passed_since_its_first_overload() {
        let mut k = cruising(0.001);
        let answer = |k: &mut Knee, status: StatusCode, sent: f64, at: f64| {
            let sample = Sample::from_secs_f64(at - sent, status)
                .with_in_flight(1)
                .with_at(at);
            k.on_sample(&sample);
        };
        // Successes before the first overload (a burst) do not count.
        for i in 0..20 {
            answer(
                &mut k,
                StatusCode::OK,
                0.9 + 0.001 * f64::from(i),
                0.901 + 0.001 * f64::from(i),
            );
        }
        assert_eq!(k.episode_level(1.0), None);
        answer(&mut k, StatusCode::SERVICE_UNAVAILABLE, 1.0, 1.0001);
        for i in 0..3 {
            let sent = 1.01 + 0.01 * f64::from(i);
            answer(&mut k, StatusCode::OK, sent, sent + 0.001);
        }
        // 3 passed in 0.1 s, at 1 ms: (3 + 1) / 0.1 * 0.001.
        let level = k.episode_level(1.1).unwrap();
        assert!((level - 0.04).abs() < 1e-12, "{level}");
        // Enough successes bring the score back to zero: no episode.
        for i in 0..40 {
            let sent = 1.2 + 0.01 * f64::from(i);
            answer(&mut k, StatusCode::OK, sent, sent + 0.001);
        }
        assert_eq!(k.episode_level(2.0), None);
    }

    #[test]
    fn a_burst_spent_at_the_start_does_not_hold_the_level_up() {
        // nginx's limit_req with a burst of 20, answering in 1 to 3 ms: a
        // client that starts at 2 in flight spends the burst in a few
        // milliseconds. Cut to what was served over those milliseconds
        // (the burst), each event left the level near one in flight: 108
        // to 185 refused in the first second. Cut no higher than the rate
        // served since the first refusal (the burst spent), at most 45.
        for rate in [10.0, 20.0, 50.0, 100.0] {
            for latency in [0.001, 0.003] {
                let mut k = Adaptive::default().knee();
                let (_, refused, sent) =
                    bucket_server(&mut k, rate, 20.0, latency, 1.0, 0.0, false);
                assert!(
                    refused <= 45,
                    "{rate}/s (burst 20) at {latency} s: {refused} of {sent} refused"
                );
            }
        }
    }

    /// An answer at `at` (sent `latency` before it) with one in flight.
    fn answer_at(k: &mut Knee, status: StatusCode, latency: f64, at: f64) -> Throttle {
        let sample = Sample::from_secs_f64(latency, status)
            .with_in_flight(1)
            .with_at(at);
        k.on_sample(&sample)
    }

    #[test]
    fn overloads_hold_their_places_while_they_are_most_answers() {
        let refused = StatusCode::SERVICE_UNAVAILABLE;
        // A random error holds nothing, nor does a second one after two
        // successes.
        let mut k = cruising(0.001);
        k.set_level(16.0, 0.0);
        assert_eq!(answer_at(&mut k, refused, 0.0, 0.010).concurrency(), 16);
        for at in [0.011, 0.012] {
            assert_eq!(
                answer_at(&mut k, StatusCode::OK, 0.001, at).concurrency(),
                16
            );
        }
        assert_eq!(answer_at(&mut k, refused, 0.0, 0.013).concurrency(), 16);
        // From the second refusal in a row, each holds its place: refused
        // at once, sent again at once, they would be refused again.
        let mut k = cruising(0.001);
        k.set_level(16.0, 0.0);
        for (i, want) in [(1, 16), (2, 14), (3, 13)] {
            let at = 0.02 + 0.001 * f64::from(i);
            assert_eq!(answer_at(&mut k, refused, 0.0, at).concurrency(), want);
        }
        assert_eq!(k.level, 16.0, "no event yet");
    }

    #[test]
    fn a_refusal_after_an_event_with_nothing_served_is_an_event() {
        // At a rate of 500 a second (a level of 0.5 at 1 ms), refusals in a
        // row: the fifth makes the CUSUM's event; the next one, sent after
        // it with nothing served since, is another, to the rate since the
        // episode's first refusal (`1 / t`: 0.071, 0.045, 0.023 here), not
        // five refusals later.
        let mut k = cruising(0.001);
        k.set_level(0.5, 0.0);
        let mut at = 0.0;
        let mut levels = Vec::new();
        for _ in 0..7 {
            at += k.throttle().delay_secs();
            answer_at(&mut k, StatusCode::SERVICE_UNAVAILABLE, 0.0, at);
            levels.push(k.level);
        }
        assert_eq!(levels[3], 0.5, "{levels:?}");
        assert!(levels[4] < 0.5, "the CUSUM's event: {levels:?}");
        assert!(
            levels[5] < 0.7 * levels[4] && levels[6] < 0.7 * levels[5],
            "{levels:?}"
        );
    }

    #[test]
    fn refusals_after_an_event_halve_the_rate_since_the_last_success() {
        // At a rate of 500 a second (a level of 0.5 at 1 ms): refused,
        // served once, then refused in a row. After the CUSUM's event,
        // each refusal (nothing served since the last event) goes to the
        // rate since the one success, `1 / t`, and sent a spacing later,
        // halves it. Counted from the first refusal, with the success in
        // it (`2 / t`), each took only about a third off (0.7 here).
        let mut k = cruising(0.001);
        k.set_level(0.5, 0.0);
        let mut at = 0.0;
        let mut levels = Vec::new();
        for i in 0..12 {
            at += k.throttle().delay_secs();
            let (status, latency) = if i == 1 {
                (StatusCode::OK, 0.001)
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, 0.0)
            };
            answer_at(&mut k, status, latency, at + latency);
            levels.push(k.level);
        }
        let event = levels
            .iter()
            .position(|l| *l < 0.5)
            .expect("the CUSUM's event");
        // (The event's own level comes from another rule: from the first
        // refusal after it, each is the rate since the success.)
        let after = &levels[event + 1..];
        assert!(after.len() >= 4, "{levels:?}");
        assert!(after[0] < levels[event], "{levels:?}");
        for pair in after.windows(2) {
            let ratio = pair[1] / pair[0];
            assert!((0.45..=0.55).contains(&ratio), "{ratio}: {levels:?}");
        }
    }

    #[test]
    fn at_a_limit_of_one_a_refusal_after_an_event_with_nothing_served_is_an_event() {
        // Two in flight at 1 ms, refused in a row and sent again at once (a
        // tenth of a millisecond apart): the fifth refusal makes the
        // CUSUM's event, to 1.4 (by β: one in flight, no delay). The next,
        // sent after it with nothing served since, is another event, below
        // a rate, not five refusals later. From 3, the event leaves two in
        // flight, where a request may have been refused for a place that a
        // success of ours still held: the CUSUM decides.
        for (level, again) in [(2.0, true), (3.0, false)] {
            let mut k = cruising(0.001);
            k.set_level(level, 0.0);
            let mut at = 0.0;
            let mut levels = Vec::new();
            for _ in 0..6 {
                at += k.throttle().delay_secs().max(0.0001);
                answer_at(&mut k, StatusCode::SERVICE_UNAVAILABLE, 0.0, at);
                levels.push(k.level);
            }
            assert_eq!(levels[3], level, "{levels:?}");
            assert!(levels[4] < level, "the CUSUM's event: {levels:?}");
            assert_eq!(levels[5] < levels[4], again, "{levels:?}");
        }
    }

    #[test]
    fn a_token_buckets_clockwork_refusals_give_its_rate() {
        // At 20 a second (a level of 0.02 at 1 ms), refused every eleventh
        // request: a bucket of 20/1.1 ≈ 18.2 a second. Two intervals that
        // passed 10 each tell it; the CUSUM (2 % against 8 %) never would.
        // Intervals of 5 and 15 (random errors) change nothing. Refused
        // one in three (a bucket of about 13 a second), the third refusal
        // tells it; one in two, a bucket that holds a single token would
        // too, at any rate from 10 to 20 a second: only a lower bound.
        for (first, second, cut) in [(10, 10, true), (5, 15, false), (2, 2, true), (1, 1, false)] {
            let mut k = cruising(0.001);
            k.set_level(0.02, 0.0);
            let events = k.events_mut();
            events.err_ceiling = 0.02;
            events.err_hi = 0.04;
            events.event_errors = 1;
            let mut at = 0.0;
            let mut send = |k: &mut Knee, status: StatusCode| {
                at += 0.05;
                let latency = if status == StatusCode::OK { 0.001 } else { 0.0 };
                answer_at(k, status, latency, at + latency);
            };
            send(&mut k, StatusCode::SERVICE_UNAVAILABLE);
            for n in [first, second] {
                for _ in 0..n {
                    send(&mut k, StatusCode::OK);
                }
                send(&mut k, StatusCode::SERVICE_UNAVAILABLE);
            }
            if cut {
                // 20 passed in 1.1 s (4 in 0.3 s): over both intervals,
                // from a spacing before the first refusal.
                let passed = f64::from(first + second);
                let want = passed / ((passed + 2.0) * 0.05) * 0.001;
                assert!((k.level - want).abs() < 1e-4, "{} against {want}", k.level);
            } else {
                assert_eq!(k.level, 0.02);
            }
        }
    }

    #[test]
    fn buckets_of_one_token_are_served_nine_tenths_of_their_rate() {
        // nginx's `limit_req` without `burst` at rates from 5 to 100 a
        // second and latencies from 0.1 to 3 ms, 30 s each: after the
        // first 10 s, each is served at least 0.89 of its rate. (With two
        // free probes, the halving descent's landings left 13/s at 3 ms at
        // 0.83 of its rate, 5/s at 1.5 ms at 0.85, and others below 0.89.)
        for rate in [5.0, 7.0, 10.0, 13.0, 20.0, 27.0, 33.0, 50.0, 70.0, 100.0] {
            for latency in [0.0001, 0.0005, 0.001, 0.0015, 0.003] {
                let mut k = Adaptive::default().knee();
                let (ok, _, _) = bucket_server(&mut k, rate, 1.0, latency, 30.0, 10.0, false);
                let thr = ok as f64 / 20.0 / rate;
                assert!(thr >= 0.89, "{rate}/s at {latency} s: {thr:.3} of the rate");
            }
        }
    }

    #[test]
    fn a_bucket_of_one_token_is_found_by_free_probes() {
        // nginx's `limit_req` without `burst` passes one request in two of
        // any rate between its own and twice it. The event's cut to half
        // the rate sent served 0.52 to 0.78 of four of these buckets'
        // rates for the whole 30 s (0.97 and 0.98 of the others); two
        // free probes find 0.90 and more (0.97 on six of the eight), and
        // after the first second the slot is refused 0 to 5 times.
        for rate in [10.0, 20.0, 50.0, 100.0] {
            for latency in [0.0001, 0.001] {
                let mut k = Adaptive::default().knee();
                let (_, first, _) = bucket_server(&mut k, rate, 1.0, latency, 1.0, 0.0, false);
                let mut k = Adaptive::default().knee();
                let (ok, refused, _) = bucket_server(&mut k, rate, 1.0, latency, 30.0, 10.0, false);
                let thr = ok as f64 / 20.0 / rate;
                assert!(thr >= 0.85, "{rate}/s at {latency} s: {thr:.2} of the rate");
                assert!(
                    refused <= first + 5,
                    "{rate}/s at {latency} s: {refused} refused, {first} in the first second"
                );
            }
        }
    }

    #[test]
    fn runs_of_refusals_of_one_length_bound_a_bucket_of_one_token() {
        // At 60 a second (a level of 0.06 at 1 ms), a bucket of one token
        // at 25 a second refuses two in a row, then passes one, over and
        // over: its rate is between 20 and 30 a second. The event cuts to
        // the share served, a third, with two free probes below the level
        // that fails, half the rate sent.
        let mut k = cruising(0.001);
        k.set_level(0.06, 0.0);
        let mut bucket = Bucket {
            rate: 25.0,
            burst: 1.0,
            latency: 0.001,
            retry_after: false,
            tokens: 1.0,
            refill: 0.0,
        };
        let mut at = 1.0;
        let mut refused = 0;
        while k.level == 0.06 && refused < 20 {
            at += k.throttle().delay_secs();
            let (_, ok) = bucket.send(at, &[]);
            refused += u32::from(!ok);
            if ok {
                answer_at(&mut k, StatusCode::OK, 0.001, at + 0.001);
            } else {
                answer_at(&mut k, StatusCode::SERVICE_UNAVAILABLE, 0.0, at);
            }
        }
        let events = k.events();
        assert!((k.level - 0.02).abs() < 0.002, "level {}", k.level);
        assert_eq!(events.free_probes, FREE_PROBES, "after {refused} refused");
        assert!((events.err_hi - 0.03).abs() < 1e-9, "{}", events.err_hi);
        assert_eq!(events.err_ceiling, k.level);
    }

    #[test]
    fn a_grid_of_fast_token_buckets() {
        // nginx's limit_req (503, no `Retry-After`) before quick pages: 72
        // buckets (10 to 400 a second, bursts 1, 5 and 20, answers in 0.1
        // to 3 ms), each from a fresh slot. Summed over the grid, the
        // refusals in the first second and in 30 s, and the buckets whose
        // rate is served within a tenth from 10 s on with under 2 %
        // refused over the 30 s. 2026-12-03, before an event above a rate
        // was bounded by what passed since the episode's first overload:
        // 2 889, 5 128 and 23; after: 1 528, 3 370 and 25.
        let (mut first, mut all, mut met) = (0, 0, 0);
        let mut table = String::new();
        for rate in [10.0, 20.0, 50.0, 100.0, 200.0, 400.0] {
            for burst in [1.0, 5.0, 20.0] {
                for latency in [0.0001, 0.0003, 0.001, 0.003] {
                    let mut k = Adaptive::default().knee();
                    let (_, r1, _) = bucket_server(&mut k, rate, burst, latency, 1.0, 0.0, false);
                    let mut k = Adaptive::default().knee();
                    let (ok, r30, s30) =
                        bucket_server(&mut k, rate, burst, latency, 30.0, 10.0, false);
                    let thr = ok as f64 / 20.0 / rate;
                    let good = thr >= 0.9 && (r30 as f64) < 0.02 * s30 as f64;
                    first += r1;
                    all += r30;
                    met += u32::from(good);
                    table += &format!(
                        "{rate}/s burst {burst} at {latency} s: {r1} refused in the first second, {r30} of {s30} in 30 s, {thr:.2} of the rate\n"
                    );
                }
            }
        }
        assert!(
            first <= 1_600 && all <= 3_500 && met >= 25,
            "first second {first}, 30 s {all}, met {met}\n{table}"
        );
    }

    /// A server of `places` that answers in `latency` and refuses at once
    /// beyond them (nginx's `limit_conn`), with 503.
    struct Places {
        places: usize,
        latency: f64,
    }

    impl TestServer for Places {
        fn send(&mut self, at: f64, out: &[(f64, bool)]) -> (f64, bool) {
            if out.iter().filter(|a| a.1).count() < self.places {
                (at + self.latency, true)
            } else {
                (at + 1e-4, false)
            }
        }

        fn answer(&mut self, at: f64, ok: bool, in_flight: usize) -> (Sample, f64) {
            let (took, status) = if ok {
                (self.latency, StatusCode::OK)
            } else {
                (1e-4, StatusCode::SERVICE_UNAVAILABLE)
            };
            let sample = Sample::from_secs_f64(took, status)
                .with_in_flight(in_flight)
                .with_at(at);
            (sample, f64::NEG_INFINITY)
        }
    }

    #[test]
    fn a_server_that_refuses_beyond_its_places_keeps_them_busy() {
        // Refusals come back at once, successes after the service time:
        // since the first refusal the host served its places, and the
        // successes still out count as served, so the rate since then
        // does not cut below them. After 10 s, at least 0.9 of the
        // places' rate.
        for (places, latency) in [(4, 0.05), (16, 0.02), (8, 0.2), (2, 0.01)] {
            let mut k = Adaptive::default().knee();
            let mut server = Places { places, latency };
            let (ok, refused, sent) = closed_loop(&mut k, &mut server, 60.0, 10.0);
            let thr = ok as f64 * latency / places as f64 / 50.0;
            assert!(
                thr >= 0.9,
                "{places} places at {latency} s: {thr} of their rate ({refused} of {sent} refused)"
            );
        }
    }

    /// Feeds answers given as (sent, latency, in flight), in the order
    /// they come back; returns the controller after each.
    fn feed(k: &mut Knee, answers: &[(f64, f64, usize)]) -> Vec<(Phase, f64)> {
        let mut sorted = answers.to_vec();
        sorted.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
        sorted
            .iter()
            .map(|&(sent, latency, in_flight)| {
                k.on_sample(&at(latency, in_flight, sent + latency));
                (k.phase, k.level)
            })
            .collect()
    }

    #[test]
    fn an_exit_nearer_a_queue_of_one_only_within_the_noise_does_not_stand() {
        // Startup left 2 in flight on four answers (log spread 0.7, a
        // Pareto host's) against a first answer quick by chance; eight
        // answers one at a time are the reference now. Halfway to a queue
        // of one is ln 2 / 2 above it.
        let reference = spread(0.07, 0.7, 8, 1.0);
        let k = verifying(reference, 1.0, Acc::default());
        let halfway = halfway_to_one(&spread(0.07, 0.7, 4, 2.0));
        let trigger = |d: f64| spread(0.07 * d.exp(), 0.7, 4, 2.0);
        let se = Test::new(&trigger(0.0), &reference).unwrap().se;
        // Past halfway, within a standard error: nothing more will tell
        // (the trigger's own four answers hold most of the noise), and
        // Startup tests the level again.
        let near = trigger(halfway + 0.5 * se);
        let t = Test::new(&near, &reference).unwrap();
        assert!(
            t.d > halfway && t.d < halfway + se,
            "{t:?}, halfway {halfway}"
        );
        assert!(!k.exit_stands(&near));
        // Beyond it, the exit stands; and nearer none, it never did.
        assert!(k.exit_stands(&trigger(halfway + 1.5 * se)));
        assert!(!k.exit_stands(&trigger(halfway - 0.5 * se)));
    }

    #[test]
    fn an_exit_against_one_quick_answer_is_judged_again() {
        // Heavy tails: the first answer quick (30 ms), the host's typical
        // one about 80 ms at any level up to its 8 workers. The round at 2
        // looks like a queue against that one answer; at one in flight,
        // eight answers make a reference against which it does not, and
        // Startup resumes (the old rule resumed only if the window after
        // that one came out below the reference: a coin's toss, and the
        // level stayed near 1 for seconds, at a quarter of the host).
        let first = [(0.0, 0.03, 2)];
        let round = [
            (0.031, 0.09, 2),
            (0.032, 0.07, 2),
            (0.033, 0.12, 2),
            (0.11, 0.085, 2),
        ];
        let one = |latencies: &[f64]| {
            let mut sent = 0.2;
            latencies
                .iter()
                .map(|&l| {
                    let answer = (sent, l, 1);
                    sent += l;
                    answer
                })
                .collect::<Vec<_>>()
        };
        let mut k = Adaptive::default().knee();
        feed(&mut k, &first);
        let exited = feed(&mut k, &round);
        assert_eq!(exited.last().unwrap().0, Phase::Cruise, "{exited:?}");
        assert!(k.level < 2.0, "{}", k.level);
        let alone = [0.06, 0.11, 0.07, 0.09, 0.05, 0.13, 0.08, 0.07, 0.1];
        let steps = feed(&mut k, &one(&alone));
        assert_eq!(k.phase, Phase::Startup, "{steps:?}");
        // The resumed Startup's reference is that window, sent one at a
        // time. A round whose answers took 1.5 times as long (a host of one
        // worker after all, with the same tails, would take twice) is short
        // of a queue beyond doubt on four answers, and nearer a queue of one
        // than none: the
        // level goes on, but the round does not join the reference (which
        // would hide the queue from every round after it) nor make a clean
        // level to come back to.
        // (Its first round is at 1, clean: up to 2.)
        let mut last = 0.2 + alone.iter().sum::<f64>();
        for latency in [0.08, 0.07, 0.09, 0.08, 0.08, 0.07] {
            if k.level >= 2.0 {
                break;
            }
            feed(&mut k, &[(last, latency, 1)]);
            last += latency;
        }
        assert_eq!((k.phase, k.level), (Phase::Startup, 2.0));
        let reference = k.reference;
        let doubt = [
            (last, 0.08, 2),
            (last, 0.2, 2),
            (last + 0.08, 0.1, 2),
            (last + 0.18, 0.18, 2),
            (last + 0.2, 0.12, 2),
        ];
        let steps = feed(&mut k, &doubt);
        assert_eq!(k.phase, Phase::Startup, "{steps:?}");
        assert!(k.level > 2.0, "{steps:?}");
        assert_eq!(k.reference, reference);
        assert!(k.clean.is_none_or(|c| c < 2.0), "{:?}", k.clean);
        // One worker: the round at 2 took twice as long as one alone,
        // and the answers one at a time confirm it. The exit stands.
        let mut k = Adaptive::default().knee();
        feed(&mut k, &[(0.0, 0.1, 2)]);
        let round = [
            (0.101, 0.2, 2),
            (0.102, 0.201, 2),
            (0.103, 0.199, 2),
            (0.302, 0.2, 2),
        ];
        let exited = feed(&mut k, &round);
        assert_eq!(exited.last().unwrap().0, Phase::Cruise, "{exited:?}");
        let steps = feed(
            &mut k,
            &one(&[0.1, 0.101, 0.099, 0.1, 0.1, 0.101, 0.099, 0.1, 0.1, 0.1]),
        );
        assert_eq!(k.phase, Phase::Cruise, "{steps:?}");
        assert!(k.level < 2.0, "{}", k.level);
    }

    #[test]
    fn a_host_slower_one_at_a_time_than_its_first_answers_is_not_held_at_one() {
        // Recorded on 127.0.0.1 (2026-12-03): a crawl through nginx's
        // `limit_conn 8` before a backend answering in 50 ms, whose reused
        // connections answer 40 ms later (Nagle's algorithm and delayed
        // ACKs). The first two answers, on new connections, took 53 ms;
        // every one after about 95 ms. Startup left at 2 on the rise
        // against a reference of one answer, to 1, and every window at 1
        // then showed a "queue" against it: the level stayed at 1 for the
        // whole crawl (57 s where 7.5 s suffice, in 2 runs of 10). Now the
        // window sent one at a time replaces that reference and Startup
        // resumes. (At, latency, in flight) of each answer:
        let samples = [
            (0.0552, 0.0532, 2),
            (0.0552, 0.0547, 2),
            (0.1511, 0.0958, 2),
            (0.1623, 0.0930, 2),
            (0.2472, 0.0953, 2),
            (0.2586, 0.0918, 1),
            (0.3554, 0.0968, 1),
            (0.4507, 0.0948, 1),
            (0.5471, 0.0959, 1),
            (0.6437, 0.0964, 1),
            (0.7389, 0.0946, 1),
            (0.8357, 0.0962, 1),
            (0.9313, 0.0951, 1),
            (1.0276, 0.0956, 1),
            (1.1240, 0.0961, 1),
            (1.2195, 0.0952, 1),
            (1.3156, 0.0955, 1),
            (1.4118, 0.0951, 1),
            (1.5074, 0.0950, 1),
            (1.6034, 0.0958, 1),
            (1.6998, 0.0956, 1),
            (1.7956, 0.0953, 1),
            (1.8922, 0.0963, 1),
            (1.9870, 0.0944, 1),
            (2.0829, 0.0950, 1),
            (2.1792, 0.0955, 1),
            (2.2748, 0.0951, 1),
            (2.3710, 0.0958, 1),
            (2.4671, 0.0957, 1),
            (2.5634, 0.0958, 1),
        ];
        let mut k = Adaptive::default().knee();
        for &(at, latency, in_flight) in &samples {
            k.on_sample(
                &Sample::from_secs_f64(latency, StatusCode::OK)
                    .with_in_flight(in_flight)
                    .with_at(at),
            );
        }
        let reference = k.reference.mean_latency();
        assert!(
            (0.09..0.1).contains(&reference),
            "the reference is the host's latency one at a time: {reference}"
        );
        assert!(k.level >= 2.0, "the level left 1: {}", k.level);
        assert_eq!(k.phase, Phase::Startup);
    }
}
