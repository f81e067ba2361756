//! Place orders, and close each one that is still unpaid a while later: the canonical use of
//! an embedded scheduler. The timeout is 2 seconds here so the example ends quickly; a shop
//! would use 30 minutes.
//!
//! Run with `cargo run -p ax-embedded --example order_timeout`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::{HandlerError, Job, Kernel, RetryPolicy};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Unpaid,
    Paid,
    Closed,
}

type Orders = Arc<Mutex<HashMap<u64, Order>>>;

const PAYMENT_WINDOW: Duration = Duration::from_secs(2);

/// The job that closes `order` if it is still unpaid; the payload carries the order number.
fn close_if_unpaid(orders: &Orders) -> Job {
    let orders = orders.clone();
    Job::new(move |ctx| {
        let orders = orders.clone();
        async move {
            let order: u64 = ctx.payload_as()?;
            let mut orders = orders
                .lock()
                .map_err(|_| HandlerError::Retryable("orders locked".into()))?;
            if orders.get(&order) == Some(&Order::Unpaid) {
                orders.insert(order, Order::Closed);
                println!("order {order}: unpaid after {PAYMENT_WINDOW:?}, closed");
            }
            Ok(())
        }
    })
    .timeout(Duration::from_secs(5))
    .retry(RetryPolicy {
        max_retries: 2,
        initial_interval: Duration::from_millis(100),
        ..RetryPolicy::default()
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kernel = Kernel::builder().build()?;
    let orders: Orders = Arc::default();
    for order in 1..=3u64 {
        orders
            .lock()
            .map_err(|_| "poisoned")?
            .insert(order, Order::Unpaid);
        let job = close_if_unpaid(&orders)
            .payload(&order)
            // A retried "place order" request schedules one close, not two.
            .idempotency_key(format!("close-order-{order}"));
        let id = kernel.after(PAYMENT_WINDOW, job)?;
        println!("order {order}: placed, close scheduled as job {id}");
    }
    orders
        .lock()
        .map_err(|_| "poisoned")?
        .insert(2, Order::Paid);
    println!("order 2: paid");

    tokio::time::sleep(PAYMENT_WINDOW + Duration::from_millis(500)).await;
    let report = kernel.shutdown(Duration::from_secs(5)).await;
    let mut end: Vec<_> = orders
        .lock()
        .map_err(|_| "poisoned")?
        .clone()
        .into_iter()
        .collect();
    end.sort_by_key(|(n, _)| *n);
    println!(
        "orders at the end: {end:?}; shutdown drained: {}",
        report.drained
    );
    Ok(())
}
