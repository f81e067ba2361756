//! A handler's `?` on the error types handlers meet most, with the retry choice each gets.

use ax_sdk::HandlerError;

fn with_anyhow(fail: bool) -> Result<(), HandlerError> {
    let step = || -> anyhow::Result<()> {
        if fail {
            anyhow::bail!("upstream said 503")
        }
        Ok(())
    };
    step().map_err(|e| e.context("charging the card"))?;
    Ok(())
}

#[test]
fn anyhow_errors_are_retried_with_their_causes() {
    assert_eq!(with_anyhow(false), Ok(()));
    let e = with_anyhow(true).unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(e.to_string(), "charging the card: upstream said 503");
}

#[test]
fn a_payload_that_does_not_parse_is_permanent() {
    let parse = |text: &str| -> Result<u64, HandlerError> { Ok(serde_json::from_str(text)?) };
    assert!(!parse("{").unwrap_err().is_retryable());
}
