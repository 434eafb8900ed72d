//! Scoring the model on held-out data while training goes on, on every core.
//!
//! A [`Scorer`] is the plain logic: it scores dense parameters on its part of
//! the held-out data (for a CTR model, predictions on a slice of the test
//! set), and [`Scorer::combine`] makes a score of every part (NE and AUC of
//! the whole). The [`Evaluator`] runs several scorers, each an
//! [`EvaluatorActor`] on a thread of its own (in an actor system of its own,
//! so it outlives the cluster for the final evaluation): every request goes to
//! all of them, each scores its part, and the combined [`Evaluation`] comes
//! back in request order. Requests queue up, so while the scorers work on one
//! the next is already waiting: N replicas scored at the end keep every
//! scorer busy, and neither the trainers nor the caller ever wait for a score
//! they did not ask to wait for.
//!
//! Memory stays bounded: each scorer holds one model and its part of the
//! data; each request holds its snapshot (shared by the scorers) until every
//! part is in.

use crate::system::{deliver, spawn_system};
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Scores a model, given its dense parameters, on its part of the held-out
/// data.
pub trait Scorer: Send + 'static {
    /// One scorer's part of a score (for example predictions and labels).
    type Part: Send + 'static;
    /// What a score is (for example NE and AUC).
    type Score: Send + 'static;
    /// Why scoring failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Scores the model whose dense parameters are `dense` on this scorer's
    /// part of the data.
    ///
    /// # Errors
    ///
    /// Whatever the scorer cannot score (its own error type).
    fn score(&mut self, dense: &[f32]) -> std::result::Result<Self::Part, Self::Error>;

    /// The score of every scorer's part, in the order the scorers were
    /// given to [`Evaluator::start`].
    ///
    /// # Errors
    ///
    /// Parts that make no score (its own error type).
    fn combine(parts: Vec<Self::Part>) -> std::result::Result<Self::Score, Self::Error>;
}

/// One scored snapshot: a score of type `S`, or the scorer's error `E`.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation<S, E> {
    /// What the caller tagged the request with (for example examples seen).
    pub tag: u64,
    /// The score, or why there is none.
    pub score: std::result::Result<S, E>,
}

/// What an [`Evaluator`] of `S` hands back.
pub type Scored<S> = Evaluation<<S as Scorer>::Score, <S as Scorer>::Error>;

/// A snapshot to score: the request's number and the dense parameters.
#[derive(Message)]
#[rtype(result = "()")]
struct Evaluate {
    request: u64,
    dense: Arc<Vec<f32>>,
}

/// What a scorer sends back: the request, the scorer, its part.
type PartReply<S> = (
    u64,
    usize,
    std::result::Result<<S as Scorer>::Part, <S as Scorer>::Error>,
);

/// The actor running one [`Scorer`].
pub struct EvaluatorActor<S: Scorer> {
    scorer: S,
    index: usize,
    parts: Sender<PartReply<S>>,
}

impl<S: Scorer + Unpin> Actor for EvaluatorActor<S> {
    type Context = Context<Self>;
}

impl<S: Scorer + Unpin> Handler<Evaluate> for EvaluatorActor<S> {
    type Result = ();

    fn handle(&mut self, request: Evaluate, _: &mut Context<Self>) {
        let part = self.scorer.score(&request.dense);
        // The channel is unbounded, so a send never waits nor fails on a
        // full queue; it fails only once the handle is gone (shutting down),
        // and then nobody is left to tell.
        let _ = self.parts.send((request.request, self.index, part));
    }
}

/// A request whose parts are coming in.
struct Open<S: Scorer> {
    request: u64,
    tag: u64,
    parts: Vec<Option<std::result::Result<S::Part, S::Error>>>,
    missing: usize,
}

/// A running evaluator: ask for scores, read them as they come.
#[must_use = "an Evaluator scores in the background: keep it to collect the scores"]
pub struct Evaluator<S: Scorer + Unpin> {
    scorers: Vec<Addr<EvaluatorActor<S>>>,
    parts: Receiver<PartReply<S>>,
    system: System,
    thread: Option<JoinHandle<()>>,
    /// Requests not answered yet, oldest first.
    open: VecDeque<Open<S>>,
    next_request: u64,
}

impl<S: Scorer + Unpin> Evaluator<S> {
    /// Starts each of `scorers` on a thread of its own.
    ///
    /// # Errors
    ///
    /// No scorer ([`Error::Internal`]), or a thread or actix system that
    /// cannot start.
    pub fn start(scorers: Vec<S>) -> Result<Self> {
        if scorers.is_empty() {
            return Err(Error::Internal("an evaluator needs a scorer"));
        }
        let (parts_tx, parts) = unbounded();
        let (system, thread, addrs) = spawn_system("shadowsync-evaluator", move || {
            scorers
                .into_iter()
                .enumerate()
                .map(|(index, scorer)| {
                    let parts = parts_tx.clone();
                    EvaluatorActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
                        EvaluatorActor {
                            scorer,
                            index,
                            parts,
                        }
                    })
                })
                .collect()
        })?;
        Ok(Self {
            scorers: addrs,
            parts,
            system,
            thread: Some(thread),
            open: VecDeque::new(),
            next_request: 0,
        })
    }

    /// How many scorers share each request.
    pub fn scorers(&self) -> usize {
        self.scorers.len()
    }

    /// Asks for the score of `dense`, tagged `tag`; returns once the request
    /// is queued with every scorer (waiting while a mailbox is full).
    ///
    /// # Errors
    ///
    /// The evaluator has stopped ([`Error::Stopped`]).
    pub fn request(&mut self, dense: Vec<f32>, tag: u64) -> Result<()> {
        let request = self.next_request;
        self.next_request += 1;
        let dense = Arc::new(dense);
        for scorer in &self.scorers {
            let message = Evaluate {
                request,
                dense: Arc::clone(&dense),
            };
            deliver(scorer, message, "evaluator")?;
        }
        self.open.push_back(Open {
            request,
            tag,
            parts: (0..self.scorers.len()).map(|_| None).collect(),
            missing: self.scorers.len(),
        });
        Ok(())
    }

    /// Requests not answered yet.
    pub fn pending(&self) -> usize {
        self.open.len()
    }

    /// The evaluations finished so far, in request order, without waiting.
    pub fn finished(&mut self) -> Vec<Scored<S>> {
        while let Ok(part) = self.parts.try_recv() {
            self.file(part);
        }
        self.complete()
    }

    /// Waits for every pending evaluation; they come in request order.
    ///
    /// # Errors
    ///
    /// The evaluator stopped ([`Error::Stopped`]); a failed scoring is an
    /// evaluation whose score is the error.
    pub fn wait_all(&mut self) -> Result<Vec<Scored<S>>> {
        let mut done = Vec::with_capacity(self.open.len());
        loop {
            done.extend(self.complete());
            if self.open.is_empty() {
                return Ok(done);
            }
            let part = self.parts.recv().map_err(|_| Error::Stopped("evaluator"))?;
            self.file(part);
        }
    }

    /// Scores `dense` and waits for the result (after any pending request).
    ///
    /// # Errors
    ///
    /// As [`Evaluator::wait_all`]; [`Error::Internal`] if the answer to this request went
    /// missing.
    pub fn score(&mut self, dense: Vec<f32>, tag: u64) -> Result<Scored<S>> {
        self.request(dense, tag)?;
        self.wait_all()?
            .pop()
            .ok_or(Error::Internal("the evaluator lost a request"))
    }

    /// Puts a scorer's part with its request. A request's parts are all in
    /// once `missing` is 0: it counts only parts filed into empty slots.
    fn file(&mut self, (request, index, part): PartReply<S>) {
        let Some(open) = self.open.iter_mut().find(|o| o.request == request) else {
            return;
        };
        if let Some(slot) = open.parts.get_mut(index) {
            if slot.replace(part).is_none() {
                open.missing -= 1;
            }
        }
    }

    /// The oldest requests whose every part is in, combined.
    fn complete(&mut self) -> Vec<Scored<S>> {
        let mut done = Vec::new();
        while self.open.front().is_some_and(|o| o.missing == 0) {
            let Some(open) = self.open.pop_front() else {
                break;
            };
            let parts = open.parts.into_iter().flatten();
            let score = parts
                .collect::<std::result::Result<_, _>>()
                .and_then(S::combine);
            done.push(Evaluation {
                tag: open.tag,
                score,
            });
        }
        done
    }
}

impl<S: Scorer + Unpin> Drop for Evaluator<S> {
    fn drop(&mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Scores `share` of the sum of the parameters (its part of the data),
    /// slowly if `slow`; fails on an empty model.
    struct Sum {
        share: f32,
        slow: bool,
    }

    impl Scorer for Sum {
        type Part = f32;
        type Score = f32;
        type Error = std::fmt::Error;

        fn score(&mut self, dense: &[f32]) -> std::result::Result<f32, std::fmt::Error> {
            if dense.is_empty() {
                return Err(std::fmt::Error);
            }
            if self.slow {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(self.share * dense.iter().sum::<f32>())
        }

        fn combine(parts: Vec<f32>) -> std::result::Result<f32, std::fmt::Error> {
            Ok(parts.iter().sum())
        }
    }

    /// Scorers whose shares add up to 1; the first one slow.
    fn scorers(n: usize) -> Vec<Sum> {
        (0..n)
            .map(|i| Sum {
                share: 1.0 / n as f32,
                slow: i == 0,
            })
            .collect()
    }

    #[test]
    fn scores_come_back_in_order_without_blocking_the_caller() {
        let mut evaluator = Evaluator::start(scorers(1)).unwrap();
        evaluator.request(vec![1.0, 2.0], 10).unwrap();
        evaluator.request(vec![], 20).unwrap();
        assert_eq!(evaluator.pending(), 2);
        let done = evaluator.wait_all().unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!((done[0].tag, done[0].score), (10, Ok(3.0)));
        assert_eq!(done[1].tag, 20);
        assert!(
            done[1].score.is_err(),
            "a failed score is reported, not lost"
        );
        assert_eq!(evaluator.score(vec![4.0], 30).unwrap().score, Ok(4.0));
        assert!(evaluator.finished().is_empty());
        assert_eq!(evaluator.pending(), 0);
    }

    #[test]
    fn every_scorer_scores_its_part_and_the_parts_combine_in_request_order() {
        // 4 scorers, the first slow, and 40 requests at once (as 40
        // trainers' final replicas are): a mailbox holds 16.
        let mut evaluator = Evaluator::start(scorers(4)).unwrap();
        assert_eq!(evaluator.scorers(), 4);
        for tag in 0..40 {
            evaluator.request(vec![tag as f32, 1.0], tag).unwrap();
        }
        let mut done = evaluator.finished();
        done.extend(evaluator.wait_all().unwrap());
        let tags: Vec<u64> = done.iter().map(|e| e.tag).collect();
        assert_eq!(tags, (0..40).collect::<Vec<_>>());
        for evaluation in &done {
            let whole = evaluation.tag as f32 + 1.0;
            let score = evaluation.score.unwrap();
            assert!((score - whole).abs() < 1e-4, "{score} vs {whole}");
        }
        // One part failing fails the whole score, and only it.
        evaluator.request(vec![], 41).unwrap();
        evaluator.request(vec![2.0], 42).unwrap();
        let done = evaluator.wait_all().unwrap();
        assert!(done[0].score.is_err());
        assert_eq!(done[1].score, Ok(2.0));
    }

    #[test]
    fn an_evaluator_of_no_scorer_is_refused() {
        assert!(Evaluator::<Sum>::start(Vec::new()).is_err());
    }
}
