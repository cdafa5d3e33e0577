//! Per-principal limits, in force only with `[auth]`: a request rate (a bucket of `requests_per_minute` requests
//! refilled evenly over a minute, or of `requests_per_hour` over an hour) and the number of `exec`/`wait` calls in
//! progress (`max_concurrent_runs`).
//!
//! Time comes from a [`Clock`], so tests move it by hand. Invariant: a run permit is given back when it is
//! dropped, however the call ends (answered, failed, cancelled).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use codemode::store::Clock;

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;

/// How many requests a principal may send per period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRate {
    /// Requests per period, also the bucket's size.
    pub requests: u32,
    /// The period (ms) over which a full bucket refills.
    pub period_ms: u64,
}

impl RequestRate {
    /// `requests` a minute.
    pub fn per_minute(requests: u32) -> Self {
        RequestRate { requests, period_ms: MINUTE_MS }
    }

    /// `requests` an hour.
    pub fn per_hour(requests: u32) -> Self {
        RequestRate { requests, period_ms: HOUR_MS }
    }
}

impl std::fmt::Display for RequestRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let period = if self.period_ms == HOUR_MS {
            "hour".to_owned()
        } else if self.period_ms == MINUTE_MS {
            "minute".to_owned()
        } else {
            format!("{} ms", self.period_ms)
        };
        write!(f, "{} requests per {period}", self.requests)
    }
}

/// A principal's request bucket: one request is `period_ms` units.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    units: u64,
    at_ms: u64,
}

/// The limits of every principal.
pub struct PrincipalLimits {
    rate: Option<RequestRate>,
    max_concurrent_runs: Option<u32>,
    clock: Arc<dyn Clock>,
    buckets: Mutex<HashMap<String, Bucket>>,
    runs: Arc<Mutex<HashMap<String, u32>>>,
}

impl std::fmt::Debug for PrincipalLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrincipalLimits")
            .field("rate", &self.rate)
            .field("max_concurrent_runs", &self.max_concurrent_runs)
            .finish()
    }
}

/// A refused request: how long until the next one is let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    /// Whole seconds to wait (at least 1), the `Retry-After` header.
    pub retry_after_s: u64,
    /// The configured rate.
    pub rate: RequestRate,
}

/// A run refused because the principal has `max` in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyRuns {
    /// `max_concurrent_runs`.
    pub max: u32,
}

/// One `exec`/`wait` call of a principal in progress; dropping it ends it.
#[derive(Debug)]
pub struct RunPermit {
    runs: Arc<Mutex<HashMap<String, u32>>>,
    key: String,
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = runs.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                runs.remove(&self.key);
            }
        }
    }
}

impl PrincipalLimits {
    /// Limits with these bounds (`None`: unbounded).
    pub fn new(rate: Option<RequestRate>, max_concurrent_runs: Option<u32>, clock: Arc<dyn Clock>) -> Self {
        PrincipalLimits { rate, max_concurrent_runs, clock, buckets: Mutex::default(), runs: Arc::default() }
    }

    /// Counts one request of `principal` (its owner key).
    ///
    /// # Errors
    ///
    /// [`RateLimited`] when the principal's bucket is empty; the request is not counted.
    pub fn admit_request(&self, principal: &str) -> Result<(), RateLimited> {
        let Some(configured) = self.rate else { return Ok(()) };
        // One request is `period_ms` units and the bucket gains `requests` units a millisecond: `requests` requests
        // a period, in whole numbers.
        let (rate, unit) = (u64::from(configured.requests), configured.period_ms);
        let capacity = rate * unit;
        let now = self.clock.now_ms();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(principal.to_owned()).or_insert(Bucket { units: capacity, at_ms: now });
        let refill = now.saturating_sub(bucket.at_ms).saturating_mul(rate);
        bucket.units = bucket.units.saturating_add(refill).min(capacity);
        bucket.at_ms = now;
        if bucket.units >= unit {
            bucket.units -= unit;
            return Ok(());
        }
        let missing_ms = (unit - bucket.units).div_ceil(rate);
        Err(RateLimited { retry_after_s: missing_ms.div_ceil(1000).max(1), rate: configured })
    }

    /// Starts one `exec`/`wait` call of `principal`.
    ///
    /// # Errors
    ///
    /// [`TooManyRuns`] when `max_concurrent_runs` of its calls are in progress.
    pub fn begin_run(&self, principal: &str) -> Result<RunPermit, TooManyRuns> {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let running = runs.entry(principal.to_owned()).or_insert(0);
        if let Some(max) = self.max_concurrent_runs
            && *running >= max
        {
            return Err(TooManyRuns { max });
        }
        *running += 1;
        Ok(RunPermit { runs: self.runs.clone(), key: principal.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use codemode::store::ManualClock;

    use super::*;

    #[test]
    fn the_request_bucket_empties_and_refills_with_the_clock() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let limits = PrincipalLimits::new(Some(RequestRate::per_minute(3)), None, clock.clone());
        for _ in 0..3 {
            limits.admit_request("jwt:alice").expect("within the burst");
        }
        assert_eq!(
            limits.admit_request("jwt:alice"),
            Err(RateLimited { retry_after_s: 20, rate: RequestRate::per_minute(3) })
        );
        limits.admit_request("jwt:bob").expect("each principal has its own bucket");
        clock.advance(19_999);
        assert!(limits.admit_request("jwt:alice").is_err(), "one request takes 20 s to come back");
        clock.advance(1);
        limits.admit_request("jwt:alice").expect("refilled");
        assert!(limits.admit_request("jwt:alice").is_err());
        clock.advance(10 * MINUTE_MS);
        for _ in 0..3 {
            limits.admit_request("jwt:alice").expect("a full bucket, never more");
        }
        assert!(limits.admit_request("jwt:alice").is_err());
    }

    #[test]
    fn an_hourly_rate_refills_over_the_hour() {
        let clock = Arc::new(ManualClock::new(5_000));
        let limits = PrincipalLimits::new(Some(RequestRate::per_hour(2)), None, clock.clone());
        limits.admit_request("token:a").expect("first");
        limits.admit_request("token:a").expect("second");
        let refused = limits.admit_request("token:a").unwrap_err();
        assert_eq!(refused, RateLimited { retry_after_s: 1_800, rate: RequestRate::per_hour(2) });
        assert_eq!(refused.rate.to_string(), "2 requests per hour");
        clock.advance(30 * MINUTE_MS - 1);
        assert!(limits.admit_request("token:a").is_err(), "one request takes half an hour to come back");
        clock.advance(1);
        limits.admit_request("token:a").expect("refilled");
        assert!(limits.admit_request("token:a").is_err());
    }

    #[test]
    fn run_permits_count_per_principal_and_come_back_on_drop() {
        let limits = PrincipalLimits::new(None, Some(2), Arc::new(ManualClock::new(0)));
        let a = limits.begin_run("token:a").expect("first");
        let b = limits.begin_run("token:a").expect("second");
        assert_eq!(limits.begin_run("token:a").unwrap_err(), TooManyRuns { max: 2 });
        let other = limits.begin_run("token:b").expect("another principal");
        drop(a);
        let c = limits.begin_run("token:a").expect("a permit came back");
        drop((b, c, other));
        assert!(limits.runs.lock().unwrap().is_empty(), "no principal is left counted");
        let unlimited = PrincipalLimits::new(None, None, Arc::new(ManualClock::new(0)));
        let permits: Vec<_> = (0..100).map(|_| unlimited.begin_run("x").expect("no bound")).collect();
        assert_eq!(permits.len(), 100);
        unlimited.admit_request("x").expect("no rate");
    }
}
