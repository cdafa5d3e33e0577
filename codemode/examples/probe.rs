//! Scratch probe (not committed).
use async_trait::async_trait;
use codemode::bridge::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, Limits, RunScope, ToolDefinition, ToolSource};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
struct Ping;
#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}
fn main() {
    let multi = std::env::args().nth(1).as_deref() == Some("multi");
    let code = std::env::args().nth(2).unwrap_or("return 1+1".into());
    let rt = if multi {
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    };
    let ping = ToolDefinition {
        name: "ping".into(),
        description: "x".into(),
        parameters: json!({"type":"object"}),
        output_schema: None,
        source: ToolSource::Openclaw,
        server: None,
        label: None,
        direct_only: false,
        replay_safe: true,
    };
    let cm = rt.block_on(async {
        CodeMode::builder()
            .limits(Limits {
                timeout_ms: std::env::var("TO").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000),
                ..Limits::default()
            })
            .tools(vec![ping])
            .host(Arc::new(Ping))
            .warm_workers(2)
            .build()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut times = vec![];
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    for _ in 0..n {
        if std::env::var("TS").is_ok() {
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await })
        } else {
            std::thread::sleep(Duration::from_millis(60))
        }
        let t = Instant::now();
        let r = if std::env::var("SPAWN").is_ok() {
            let cm2 = cm.clone();
            let c2 = code.clone();
            rt.block_on(async move {
                tokio::spawn(async move { cm2.exec(json!({"title": "probe", "code": c2}), RunScope::default()).await })
                    .await
                    .unwrap()
            })
        } else {
            rt.block_on(cm.exec(json!({"title": "probe", "code": code}), RunScope::default()))
        };
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if times.len() == 1 {
            println!("{r:?}");
        }
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median {:.3} ms min {:.3}", times[n / 2], times[0]);
}
