//! Where a task's arguments may go and what they may look like: the operator's rule.
//!
//! A program's own options decide what an argument means: `rsync -e CMD`, `tar
//! --checkpoint-action=exec=CMD`, `git -c core.sshCommand=CMD`, `find -exec` all run code.
//! Appending a task's arguments to the operator's therefore hands the task author every
//! option the program has. So each command says, in `task_args`, what a task may pass:
//!
//! - `none` (the default): nothing; a task with arguments is refused.
//! - `after_separator`: anything, placed after a `--` inserted after the operator's
//!   arguments, so a program that follows the convention reads them as operands, never as
//!   options. (Only when the task passes arguments: a lone `--` would confuse programs
//!   that take none.)
//! - `patterns`: argument *i* must match `arg_patterns[i]` entirely; a task passes at most
//!   as many arguments as there are patterns.
//!
//! The same check runs where the user sees it (`ax task put`, `--dry-run`, the API's
//! answer) and on the worker before the program starts, since the replica that takes the
//! execution may be configured differently from the one that accepted the task.

use regex::Regex;
use serde::{Deserialize, Serialize};

/// What a task may pass to a command: `worker.commands.<name>.task_args`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskArgs {
    /// No arguments.
    #[default]
    None,
    /// Any arguments, after a `--`.
    AfterSeparator,
    /// One argument per pattern of `arg_patterns`, each matching its pattern entirely.
    Patterns,
}

impl TaskArgs {
    /// The rule as it is written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskArgs::None => "none",
            TaskArgs::AfterSeparator => "after_separator",
            TaskArgs::Patterns => "patterns",
        }
    }
}

/// `pattern` as a regex matching a whole argument.
fn anchored(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

/// The problems of a command's `rule` and `patterns`, as (field, what is wrong), for the
/// configuration check.
pub(crate) fn problems(rule: TaskArgs, patterns: &[String]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    match rule {
        TaskArgs::Patterns if patterns.is_empty() => out.push((
            "arg_patterns",
            "task_args = \"patterns\" needs at least one pattern (or use \"none\")".to_owned(),
        )),
        TaskArgs::Patterns => {}
        rule if !patterns.is_empty() => out.push((
            "arg_patterns",
            format!(
                "is set, but task_args is \"{}\": patterns apply only with task_args = \"patterns\"",
                rule.as_str()
            ),
        )),
        _ => {}
    }
    if patterns.len() > ax_scheduler_core::task::MAX_COMMAND_ARGS {
        out.push((
            "arg_patterns",
            format!(
                "has {} patterns; a task passes at most {}",
                patterns.len(),
                ax_scheduler_core::task::MAX_COMMAND_ARGS
            ),
        ));
    }
    for (i, p) in patterns.iter().enumerate() {
        if let Err(e) = anchored(p) {
            out.push((
                "arg_patterns",
                format!("entry {i} is not a valid regex: {e}"),
            ));
        }
    }
    out
}

/// Whether the task's `args` are allowed by command `name`'s `rule` and `patterns`; the
/// refusal names the command, the rule and the argument.
pub(crate) fn check(
    name: &str,
    rule: TaskArgs,
    patterns: &[String],
    args: &[String],
) -> Result<(), String> {
    let key = format!("worker.commands.{name}");
    match rule {
        _ if args.is_empty() => Ok(()),
        TaskArgs::None => Err(format!(
            "command `{name}` takes no arguments from a task ({key}.task_args is \"none\"), \
             but the task passes {}: remove command.args, or have an operator allow them with \
             task_args = \"after_separator\" or \"patterns\"",
            args.len()
        )),
        TaskArgs::AfterSeparator => Ok(()),
        TaskArgs::Patterns => {
            if args.len() > patterns.len() {
                return Err(format!(
                    "command `{name}` takes at most {} argument(s) from a task ({key}.arg_patterns), \
                     but the task passes {}",
                    patterns.len(),
                    args.len()
                ));
            }
            for (i, (arg, pattern)) in args.iter().zip(patterns).enumerate() {
                // A pattern that does not compile was refused when the configuration was
                // loaded; refusing the argument keeps this safe if it ever is not.
                let matches = anchored(pattern).is_ok_and(|re| re.is_match(arg));
                if !matches {
                    return Err(format!(
                        "command `{name}`: argument {i} ({:?}) does not match the pattern \
                         `{pattern}` ({key}.arg_patterns[{i}], task_args = \"patterns\")",
                        arg
                    ));
                }
            }
            Ok(())
        }
    }
}

/// The program's arguments: the operator's (`fixed`), then the task's (`args`) where `rule`
/// puts them. `args` must have passed [`check`].
pub(crate) fn argv<'a>(fixed: &'a [String], rule: TaskArgs, args: &'a [String]) -> Vec<&'a str> {
    let mut out: Vec<&str> = fixed.iter().map(String::as_str).collect();
    if rule == TaskArgs::AfterSeparator && !args.is_empty() {
        out.push("--");
    }
    out.extend(args.iter().map(String::as_str));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CommandConfig;

    fn chk(name: &str, cfg: &CommandConfig, args: &[String]) -> Result<(), String> {
        check(name, cfg.task_args, &cfg.arg_patterns, args)
    }

    fn av<'a>(cfg: &'a CommandConfig, args: &'a [String]) -> Vec<&'a str> {
        argv(&cfg.args, cfg.task_args, args)
    }

    fn probs(cfg: &CommandConfig) -> Vec<(&'static str, String)> {
        problems(cfg.task_args, &cfg.arg_patterns)
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn none_refuses_any_argument_and_names_the_rule() {
        let cfg = CommandConfig::new("/usr/bin/rsync");
        assert!(chk("sync", &cfg, &[]).is_ok());
        let e = chk("sync", &cfg, &args(&["-e", "sh -c id"])).unwrap_err();
        assert!(
            e.starts_with(
                "command `sync` takes no arguments from a task \
                 (worker.commands.sync.task_args is \"none\"), but the task passes 2"
            ),
            "{e}"
        );
    }

    #[test]
    fn after_separator_puts_the_task_args_after_a_double_dash() {
        let cfg = CommandConfig {
            args: args(&["-a"]),
            task_args: TaskArgs::AfterSeparator,
            ..CommandConfig::new("/usr/bin/rsync")
        };
        let task = args(&["-e", "sh"]);
        assert!(chk("sync", &cfg, &task).is_ok());
        assert_eq!(av(&cfg, &task), ["-a", "--", "-e", "sh"]);
        assert_eq!(av(&cfg, &[]), ["-a"]);
    }

    #[test]
    fn patterns_match_whole_arguments_by_position_and_bound_the_count() {
        let cfg = CommandConfig {
            task_args: TaskArgs::Patterns,
            arg_patterns: args(&["[a-z]+", "[0-9]{1,3}"]),
            ..CommandConfig::new("/usr/local/bin/report")
        };
        assert!(chk("report", &cfg, &args(&["daily", "7"])).is_ok());
        assert!(chk("report", &cfg, &args(&["daily"])).is_ok());
        let e = chk("report", &cfg, &args(&["daily", "7; id"])).unwrap_err();
        assert!(
            e.contains("argument 1 (\"7; id\") does not match the pattern `[0-9]{1,3}`"),
            "{e}"
        );
        assert!(chk("report", &cfg, &args(&["--exec=x"])).is_err());
        assert!(chk("report", &cfg, &args(&["a|b"])).is_err());
        let e = chk("report", &cfg, &args(&["a", "1", "b"])).unwrap_err();
        assert!(e.contains("takes at most 2 argument(s)"), "{e}");
        assert_eq!(av(&cfg, &args(&["a"])), ["a"]);
    }

    #[test]
    fn a_patterns_rule_needs_valid_patterns() {
        let mut cfg = CommandConfig {
            task_args: TaskArgs::Patterns,
            ..CommandConfig::new("/x")
        };
        assert_eq!(probs(&cfg).len(), 1);
        assert!(probs(&cfg)[0].1.contains("needs at least one pattern"));
        cfg.arg_patterns = args(&["("]);
        assert!(probs(&cfg)[0].1.starts_with("entry 0 is not a valid regex"));
        cfg.arg_patterns = args(&["[a-z]+"]);
        assert!(probs(&cfg).is_empty());
        cfg.task_args = TaskArgs::None;
        assert!(probs(&cfg)[0].1.contains("task_args is \"none\""));
    }
}
