//! Scoring the model on held-out data while training goes on.
//!
//! A [`Scorer`] is the plain logic: it turns dense parameters into a score (for a
//! CTR model, NE and AUC on a test set). The [`EvaluatorActor`] runs one on its
//! own thread: each request carries a snapshot of the model and the progress it
//! was taken at, and the scored [`Evaluation`] comes back on a channel, so neither
//! the trainers nor the caller ever wait for a score they did not ask to wait for.
//! [`Evaluator`] is the handle: it starts the actor (in an actor system of its
//! own, so it outlives the cluster for the final evaluation) and stops it when
//! dropped.

use crate::system::{deliver, spawn_system};
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::thread::JoinHandle;

/// Scores a model given its dense parameters.
pub trait Scorer: Send + 'static {
    /// What a score is (for example NE and AUC).
    type Score: Send + 'static;
    /// Why scoring failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Scores the model whose dense parameters are `dense`.
    ///
    /// # Errors
    ///
    /// Whatever the scorer cannot score (its own error type).
    fn score(&mut self, dense: &[f32]) -> std::result::Result<Self::Score, Self::Error>;
}

/// One scored snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation<S> {
    /// What the caller tagged the request with (for example examples seen).
    pub tag: u64,
    /// The score, or why there is none.
    pub score: std::result::Result<S, String>,
}

/// A snapshot to score.
#[derive(Message)]
#[rtype(result = "()")]
struct Evaluate {
    dense: Vec<f32>,
    tag: u64,
}

/// The actor running a [`Scorer`].
pub struct EvaluatorActor<S: Scorer> {
    scorer: S,
    results: Sender<Evaluation<S::Score>>,
}

impl<S: Scorer + Unpin> Actor for EvaluatorActor<S> {
    type Context = Context<Self>;
}

impl<S: Scorer + Unpin> Handler<Evaluate> for EvaluatorActor<S> {
    type Result = ();

    fn handle(&mut self, request: Evaluate, _: &mut Context<Self>) {
        let score = self.scorer.score(&request.dense).map_err(|e| e.to_string());
        // The handle may be gone (shutting down): nobody to tell.
        let _ = self.results.send(Evaluation {
            tag: request.tag,
            score,
        });
    }
}

/// A running evaluator: ask for scores, read them as they come.
pub struct Evaluator<S: Scorer + Unpin> {
    addr: Addr<EvaluatorActor<S>>,
    results: Receiver<Evaluation<S::Score>>,
    system: System,
    thread: Option<JoinHandle<()>>,
    pending: usize,
}

impl<S: Scorer + Unpin> Evaluator<S> {
    /// Starts `scorer` on a thread of its own.
    ///
    /// # Errors
    ///
    /// A thread or actix system that cannot start.
    pub fn start(scorer: S) -> Result<Self> {
        let (results_tx, results) = unbounded();
        let (system, thread, addr) = spawn_system("shadowsync-evaluator", move || {
            EvaluatorActor {
                scorer,
                results: results_tx,
            }
            .start()
        })?;
        Ok(Self {
            addr,
            results,
            system,
            thread: Some(thread),
            pending: 0,
        })
    }

    /// Asks for the score of `dense`, tagged `tag`; returns once the request
    /// is queued (waiting while the evaluator's mailbox is full).
    ///
    /// # Errors
    ///
    /// The evaluator has stopped ([`Error::Stopped`]).
    pub fn request(&mut self, dense: Vec<f32>, tag: u64) -> Result<()> {
        deliver(&self.addr, Evaluate { dense, tag }, "evaluator")?;
        self.pending += 1;
        Ok(())
    }

    /// Requests not answered yet.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The evaluations finished so far, without waiting.
    pub fn finished(&mut self) -> Vec<Evaluation<S::Score>> {
        let done: Vec<_> = self.results.try_iter().collect();
        self.pending = self.pending.saturating_sub(done.len());
        done
    }

    /// Waits for every pending evaluation.
    ///
    /// # Errors
    ///
    /// The evaluator stopped, or a scoring failed (its error, named).
    pub fn wait_all(&mut self) -> Result<Vec<Evaluation<S::Score>>> {
        let mut done = Vec::with_capacity(self.pending);
        while self.pending > 0 {
            let evaluation = self
                .results
                .recv()
                .map_err(|_| Error::Stopped("evaluator"))?;
            self.pending -= 1;
            done.push(evaluation);
        }
        Ok(done)
    }

    /// Scores `dense` and waits for the result (after any pending request).
    ///
    /// # Errors
    ///
    /// As [`Evaluator::wait_all`]; [`Error::Internal`] if the answer to this request went
    /// missing.
    pub fn score(&mut self, dense: Vec<f32>, tag: u64) -> Result<Evaluation<S::Score>> {
        self.request(dense, tag)?;
        self.wait_all()?
            .pop()
            .ok_or(Error::Internal("the evaluator lost a request"))
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

    /// Scores the sum of the parameters; fails on an empty model.
    struct Sum;

    impl Scorer for Sum {
        type Score = f32;
        type Error = std::fmt::Error;

        fn score(&mut self, dense: &[f32]) -> std::result::Result<f32, std::fmt::Error> {
            if dense.is_empty() {
                return Err(std::fmt::Error);
            }
            Ok(dense.iter().sum())
        }
    }

    #[test]
    fn scores_come_back_in_order_without_blocking_the_caller() {
        let mut evaluator = Evaluator::start(Sum).unwrap();
        evaluator.request(vec![1.0, 2.0], 10).unwrap();
        evaluator.request(vec![], 20).unwrap();
        assert_eq!(evaluator.pending(), 2);
        let done = evaluator.wait_all().unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!((done[0].tag, done[0].score.clone()), (10, Ok(3.0)));
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
    fn more_requests_at_once_than_a_mailbox_holds_are_all_scored() {
        // A slow scorer, and 40 requests at once (as 40 trainers' final
        // replicas are): a mailbox holds 16.
        struct SlowSum;
        impl Scorer for SlowSum {
            type Score = f32;
            type Error = std::fmt::Error;
            fn score(&mut self, dense: &[f32]) -> std::result::Result<f32, std::fmt::Error> {
                std::thread::sleep(std::time::Duration::from_millis(1));
                Sum.score(dense)
            }
        }
        let mut evaluator = Evaluator::start(SlowSum).unwrap();
        for tag in 0..40 {
            evaluator.request(vec![tag as f32], tag).unwrap();
        }
        let done = evaluator.wait_all().unwrap();
        let tags: Vec<u64> = done.iter().map(|e| e.tag).collect();
        assert_eq!(tags, (0..40).collect::<Vec<_>>());
        assert!(done.iter().all(|e| e.score == Ok(e.tag as f32)));
    }
}
