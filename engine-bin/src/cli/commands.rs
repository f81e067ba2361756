//! What each command does, given the parsed command line and the facts read at the edge.
//!
//! Task, dead-letter and status commands talk to etcd and Redis directly through the same
//! [`Backend`] that serves `/api/v1`, with the configuration a replica would use, so the CLI
//! works with no replica running. Every command loads and validates the configuration first,
//! so a broken configuration is reported the same way by all of them. Redis is connected only
//! by the commands that need it.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use crate::cli::edge::Edge;
use crate::cli::output;
use crate::cli::plumbing::{api_error, backend, print_stdout};
use crate::cli::task_file;
use crate::cli::{
    password_warning, Cli, CliError, Command, ConfigCommand, DlqCommand, ExecutionCommand,
    FenceCommand, HistoryArgs, NamespaceCommand, OutputFormat, QueueCommand, TaskCommand,
    TokenCommand,
};
use crate::config::{Config, LoadOptions, DEFAULT_CONFIG_PATH};
use crate::serve::logging::{self, LogSettings, LogTarget};
use crate::serve::shutdown::Shutdown;
use crate::serve::Server;
use ax_control::api::{
    ApiBackend, ApiError, BackfillParams, DlqRequeue, ExecutionParams, PutOptions, TaskQuery,
    TaskView, TriggerParams,
};
use ax_control::audit::{Actor, AuditQuery};
use ax_control::backend::Backend;
use ax_control::operations::Operations;
use ax_scheduler_core::{ExecutionId, TaskKey, UtcMillis};

/// Time allowed past `worker.shutdown_grace` for everything else to stop.
const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);

/// Runs the command.
pub async fn run(cli: Cli, edge: &Edge) -> Result<(), CliError> {
    let serving = matches!(cli.command, Command::Serve(_));
    // The server logs to stdout at info; one-shot commands keep stdout for their output.
    let (default_filter, target) = if serving {
        ("info", LogTarget::Stdout)
    } else {
        ("warn", LogTarget::Stderr)
    };
    let settings = LogSettings::resolve(cli.global.log_format, &edge.env, default_filter, target)
        .map_err(CliError::Usage)?;
    let _log_guard = logging::init(&settings).map_err(CliError::Usage)?;
    if serving {
        // Before anything runs a command: its children must not read this process.
        crate::serve::hardening::apply();
    }

    let config = load_config(&cli, edge)?;
    let actor = Actor::cli(cli_actor(edge));
    let actor = &actor;
    match cli.command {
        Command::Token(TokenCommand::New { name, role }) => print_stdout(&new_token(&name, role)),
        Command::Namespace(cmd) => namespace(&config, actor, cmd).await,
        Command::Serve(_) => serve(config, edge.hostname.clone()).await,
        Command::Config(ConfigCommand::Print(_)) => {
            print_stdout(&config.to_masked_toml())?;
            Ok(())
        }
        Command::Task(TaskCommand::Put {
            file,
            dry_run,
            allow_unserved_handler,
            id,
            namespace,
        }) => {
            task_put(
                &config,
                actor,
                &file,
                PutOptions {
                    dry_run,
                    allow_unserved_handler,
                },
                id.as_deref(),
                namespace.as_deref(),
            )
            .await
        }
        Command::Task(cmd) => task(&config, actor, cmd).await,
        Command::Dlq(cmd) => dlq(&config, actor, cmd).await,
        Command::History(args) => history(&config, args).await,
        Command::Execution(ExecutionCommand::Get { id, output }) => {
            execution_get(&config, id, output).await
        }
        Command::Audit {
            since,
            actor: only,
            limit,
            continue_token,
            output,
        } => {
            let query = AuditQuery {
                since: since.map(|d| UtcMillis::now().sub(d)),
                actor: only,
                limit: Some(usize::from(limit)),
                continue_token,
            };
            audit_list(&config, query, output).await
        }
        Command::Queue(cmd) => queue(&config, actor, cmd).await,
        Command::Scheduled(cmd) => super::scheduled::run(&config, actor, cmd).await,
        Command::Fence(FenceCommand::Reseat { queue }) => fence_reseat(&config, actor, queue).await,
        Command::Status { output } => {
            let status = backend(&config).await?.status().await.map_err(api_error)?;
            print_stdout(&match output {
                OutputFormat::Table => output::status_text(&status),
                OutputFormat::Json => output::json(&status),
            })
        }
    }
}

/// `ax namespace pause|resume`.
async fn namespace(config: &Config, actor: &Actor, cmd: NamespaceCommand) -> Result<(), CliError> {
    let b = backend(config).await?;
    let ops = Operations::new(&b, actor);
    let (action, namespace) = match cmd {
        NamespaceCommand::Pause { namespace } => {
            ops.pause_namespace(namespace.clone())
                .await
                .map_err(api_error)?;
            ("namespace.pause", namespace)
        }
        NamespaceCommand::Resume { namespace } => {
            ops.resume_namespace(namespace.clone())
                .await
                .map_err(api_error)?;
            ("namespace.resume", namespace)
        }
    };
    let done = if action == "namespace.pause" {
        "paused"
    } else {
        "resumed"
    };
    print_stdout(&format!("namespace {namespace} {done}\n"))
}

/// An execution id given on the command line, parsed once here.
fn execution_arg(text: &str) -> Result<ExecutionId, CliError> {
    text.parse()
        .map_err(|_| CliError::Invalid(vec![format!("`{text}` is not an execution id")]))
}

/// `ax execution get`: a whole id, or the start or the end of one (found in the history
/// across tasks; several matches are listed). A fragment is checked before anything is
/// connected.
async fn execution_get(config: &Config, id: String, output: OutputFormat) -> Result<(), CliError> {
    let whole = id.trim().parse::<ExecutionId>().ok();
    if whole.is_none() {
        ax_control::api::id_fragment(&id).map_err(api_error)?;
    }
    let b = backend(config).await?;
    let id = match whole {
        Some(id) => id,
        None => b
            .find_executions(id)
            .await
            .and_then(|found| found.unique())
            .map_err(|e| match e {
                // The candidates say nothing without the line that introduces them.
                ApiError::Invalid { message, errors } => {
                    CliError::Invalid(std::iter::once(message).chain(errors).collect())
                }
                e => api_error(e),
            })?,
    };
    let story = b.execution(id).await.map_err(api_error)?;
    print_stdout(&match output {
        OutputFormat::Table => output::story_text(&story),
        OutputFormat::Json => output::json(&story),
    })
}

/// `ax audit`: one page of the audit log, and on stderr how to get the next.
async fn audit_list(
    config: &Config,
    query: AuditQuery,
    output: OutputFormat,
) -> Result<(), CliError> {
    let page = backend(config)
        .await?
        .audit_list(query)
        .await
        .map_err(api_error)?;
    if let Some(token) = &page.continue_token {
        eprintln!("more records follow: add --continue {token}");
    }
    print_stdout(&match output {
        OutputFormat::Table => output::audit_table(&page.items),
        OutputFormat::Json => output::json(&page.items),
    })
}

/// `ax queue show|pause|resume`.
async fn queue(config: &Config, actor: &Actor, cmd: QueueCommand) -> Result<(), CliError> {
    let b = backend(config).await?;
    let state = match cmd {
        QueueCommand::Show {
            name,
            limit,
            output: format,
        } => {
            if !(1..=500).contains(&limit) {
                return Err(api_error(ApiError::invalid(format!(
                    "--limit: {limit} is out of range 1-500"
                ))));
            }
            let contents = b.queue_contents(name, limit).await.map_err(api_error)?;
            return print_stdout(&match format {
                OutputFormat::Table => output::queue_text(&contents),
                OutputFormat::Json => output::json(&contents),
            });
        }
        QueueCommand::Pause { name } => Operations::new(&b, actor).pause_queue(name).await,
        QueueCommand::Resume { name } => Operations::new(&b, actor).resume_queue(name).await,
    };
    let state = state.map_err(api_error)?;
    let what = if state.paused { "paused" } else { "resumed" };
    print_stdout(&format!("queue {} {what}\n", state.name))
}

/// `ax fence reseat`: one queue, or all of them.
async fn fence_reseat(
    config: &Config,
    actor: &Actor,
    queue: Option<String>,
) -> Result<(), CliError> {
    let b = backend(config).await?;
    let reseated = b.reseat_fences(queue.clone()).await.map_err(api_error)?;
    let mut text = String::new();
    for (queue, token) in &reseated {
        text.push_str(&format!("queue {queue}: fence reseated at {token}\n"));
    }
    let target = queue.unwrap_or_default();
    Operations::new(&b, actor)
        .record("fence.reseat", target, None, None)
        .await;
    print_stdout(&text)
}

/// Loads the effective configuration from the command line and the edge.
pub fn load_config(cli: &Cli, edge: &Edge) -> Result<Config, CliError> {
    let overrides = cli.overrides();
    if let Some(warning) = overrides.redis_url.as_deref().and_then(password_warning) {
        eprintln!("warning: {warning}");
    }
    Ok(Config::load(LoadOptions {
        config_flag: cli.global.config.as_deref(),
        env: &edge.env,
        overrides: &overrides,
        default_path: Some(Path::new(DEFAULT_CONFIG_PATH)),
        hostname: edge.hostname.as_deref(),
    })?)
}

async fn serve(config: Config, host: Option<String>) -> Result<(), CliError> {
    // A command stopped at the end of the grace gets its own grace to end.
    let deadline = config.worker.shutdown_grace
        + config.worker.commands_config().longest_stop()
        + SHUTDOWN_MARGIN;
    let shutdown = Shutdown::new();
    shutdown
        .listen_for_signals()
        .map_err(|e| CliError::Failed(anyhow::anyhow!("cannot listen for signals: {e}")))?;
    let run = async {
        match Server::bind(config).await {
            Ok(server) => server.with_host(host).run(&shutdown).await,
            Err(e) => {
                shutdown.cancel();
                Err(e)
            }
        }
    };
    let result = match shutdown.bound(deadline, run).await {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "the drain did not finish in time; exiting anyway");
            return Err(CliError::Failed(e.into()));
        }
    };
    if let Err(e) = shutdown.wait(deadline).await {
        tracing::error!(error = %e, "shutdown did not finish in time; exiting anyway");
        result?;
        return Err(CliError::Failed(e.into()));
    }
    result?;
    if let Some(reason) = shutdown.failure() {
        tracing::error!(%reason, "stopped after a fatal error");
        return Err(CliError::Failed(anyhow::anyhow!(reason)));
    }
    tracing::info!("stopped");
    Ok(())
}

/// A new token and its configuration entry.
fn new_token(name: &str, role: ax_control::api::TokenRole) -> String {
    let token = ax_control::api::new_token();
    let hash = ax_control::api::to_hex(&ax_control::api::sha256(&token));
    format!(
        "# The token, for its holder only (Authorization: Bearer <token>); ax keeps no copy:\n\
         # {token}\n\
         # Add to ax.toml (or the chart's config.http.tokens) on every replica:\n\
         [[http.tokens]]\n\
         name = {}\n\
         role = \"{}\"\n\
         sha256 = \"{hash}\"\n",
        toml_string(name),
        role.as_str()
    )
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The tasks `query` selects, page after page; only its first page when `one_page` (then
/// saying on stderr how to get the next).
async fn list_tasks(
    b: &Backend,
    mut query: TaskQuery,
    one_page: bool,
) -> Result<Vec<TaskView>, CliError> {
    let mut tasks = Vec::new();
    loop {
        let page = b.list_tasks(query.clone()).await.map_err(api_error)?;
        tasks.extend(page.items);
        match page.continue_token {
            Some(token) if one_page => {
                eprintln!("more tasks follow: add --continue {token}");
                break;
            }
            Some(token) => query.continue_token = Some(token),
            None => break,
        }
    }
    Ok(tasks)
}

/// Validates a spec file (before anything is connected); with `--dry-run` prints the
/// preview, otherwise registers it and prints its next fires.
async fn task_put(
    config: &Config,
    actor: &Actor,
    file: &str,
    opts: PutOptions,
    id: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), CliError> {
    let bytes = read_input(file)?;
    let key = task_file::resolve_key(&bytes, file, id, namespace).map_err(CliError::Usage)?;
    let spec = task_file::validate(&bytes, &key).map_err(CliError::Invalid)?;
    // The clock is read here, at the edge; the preview itself is a function of `now`.
    let now = UtcMillis::now();
    // Valid, so the document is an object whose `id` and `namespace`, if present, are the
    // key's: writing the key into it only fills in what came from flags or the file name.
    let mut doc: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Invalid(vec![format!("not valid JSON: {e}")]))?;
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("id".into(), serde_json::Value::from(&*key.id));
        obj.insert("namespace".into(), serde_json::Value::from(&*key.namespace));
    }
    if opts.dry_run {
        // Every check the put runs (the commands the replicas allow, a handler some worker
        // serves), where the cluster can be reached; without it the spec's own checks.
        let mut report = task_file::preview(&spec, now).map_err(CliError::Invalid)?;
        match backend(config).await {
            Ok(b) => {
                Operations::new(&b, actor)
                    .put_task(doc, opts)
                    .await
                    .map_err(api_error)?;
            }
            Err(e) => {
                ax_control::backend::check_command(&spec, &config.worker.commands_config())
                    .map_err(CliError::Invalid)?;
                report.push_str(&format!(
                    "(the cluster was not reached, so the handler's workers were not checked: {e})\n"
                ));
            }
        }
        return print_stdout(&report);
    }
    let b = backend(config).await?;
    let result = Operations::new(&b, actor)
        .put_task(doc, opts)
        .await
        .map_err(api_error)?;
    let verb = if result.unchanged {
        "unchanged: this spec is registered already"
    } else {
        "registered"
    };
    let mut out = format!(
        "task {}/{} {verb} (version {})\n",
        result.namespace, result.id, spec.version
    );
    if spec.paused {
        out.push_str("it is paused: it will not fire until resumed\n");
    }
    out.push_str(&output::fire_lines(&result.next_fires, &spec.schedule));
    print_stdout(&out)
}

/// `ax task get|list|delete|pause|resume|trigger|backfill|kill|graph|history`.
async fn task(config: &Config, actor: &Actor, cmd: TaskCommand) -> Result<(), CliError> {
    // Parse the task name before connecting: a usage error needs no cluster.
    let key = match &cmd {
        TaskCommand::Get { task: r, .. }
        | TaskCommand::Delete(r)
        | TaskCommand::Pause(r)
        | TaskCommand::Resume(r)
        | TaskCommand::Trigger { task: r, .. }
        | TaskCommand::Backfill { task: r, .. }
        | TaskCommand::Kill { task: r, .. }
        | TaskCommand::Graph { task: r, .. }
        | TaskCommand::History { task: r, .. } => Some(r.key()?),
        TaskCommand::Put { .. } | TaskCommand::List { .. } => None,
    };
    let b = backend(config).await?;
    let name = key.as_ref().map(ToString::to_string).unwrap_or_default();
    let text = match (cmd, key) {
        (
            TaskCommand::List {
                namespace,
                status,
                label,
                limit,
                continue_token,
                show_secrets,
                output,
            },
            _,
        ) => {
            let query = TaskQuery {
                namespace,
                status,
                label,
                search: None,
                limit: limit.map(usize::from),
                continue_token,
                show_secrets,
            };
            task_list(&b, query, output).await?
        }
        (cmd, Some(k)) => task_keyed(&b, actor, &name, k, cmd).await?,
        (cmd, None) => return Err(unexpected(&cmd)),
    };
    print_stdout(&text)
}

/// The task commands that name one task, `key`; what they print.
async fn task_keyed(
    b: &Backend,
    actor: &Actor,
    name: &str,
    k: TaskKey,
    cmd: TaskCommand,
) -> Result<String, CliError> {
    let ops = Operations::new(b, actor);
    Ok(match cmd {
        TaskCommand::Graph { dot, .. } => task_graph(b, &k, name, dot).await?,
        TaskCommand::Get {
            show_secrets,
            output: format,
            ..
        } => {
            let mut view = b.get_task(k).await.map_err(api_error)?;
            if !show_secrets {
                view.mask_secrets();
            }
            match format {
                OutputFormat::Table => output::task_text(&view),
                OutputFormat::Json => output::json(&view),
            }
        }
        TaskCommand::Delete(_) => {
            ops.delete_task(k).await.map_err(api_error)?;
            format!("task {name} deleted\n")
        }
        TaskCommand::Pause(_) => {
            ops.pause(k).await.map_err(api_error)?;
            format!("task {name} paused\n")
        }
        TaskCommand::Resume(_) => {
            ops.resume(k).await.map_err(api_error)?;
            format!("task {name} resumed\n")
        }
        TaskCommand::Trigger {
            payload,
            idempotency_key,
            ..
        } => {
            let params = TriggerParams {
                payload: read_payload(payload.as_deref())?,
                idempotency_key,
                requested_by: None,
            };
            task_trigger(&ops, k, params).await?
        }
        TaskCommand::Backfill {
            from,
            to,
            max,
            force,
            dry_run,
            ..
        } => {
            let params = BackfillParams {
                from,
                to,
                max: Some(max),
                force,
                dry_run,
                requested_by: None,
            };
            task_backfill(&ops, name, k, params).await?
        }
        TaskCommand::Kill { execution, .. } => {
            let execution = execution.as_deref().map(execution_arg).transpose()?;
            let result = ops.kill_task(k, execution).await.map_err(api_error)?;
            output::kill_text(&result)
        }
        TaskCommand::History { limit, output, .. } => {
            let records = b.history(k, usize::from(limit)).await.map_err(api_error)?;
            match output {
                OutputFormat::Table => output::history_table(&records),
                OutputFormat::Json => output::json(&records),
            }
        }
        cmd @ (TaskCommand::Put { .. } | TaskCommand::List { .. }) => return Err(unexpected(&cmd)),
    })
}

/// A task command routed where it does not belong: a bug, not a usage error.
fn unexpected(cmd: &TaskCommand) -> CliError {
    CliError::Failed(anyhow::anyhow!(
        "internal error: unexpected task command {cmd:?}"
    ))
}

/// `ax task graph`: the chain around `key`, as text or DOT.
async fn task_graph(b: &Backend, key: &TaskKey, name: &str, dot: bool) -> Result<String, CliError> {
    let tasks = list_tasks(b, TaskQuery::default(), false).await?;
    let chain = output::Chain::around(&key.namespace, &key.id, &tasks)
        .ok_or_else(|| CliError::NotFound(format!("task {name} does not exist")))?;
    Ok(if dot { chain.dot() } else { chain.text() })
}

/// `ax task list`: every page, or only the first when a limit is given.
async fn task_list(
    b: &Backend,
    query: TaskQuery,
    output: OutputFormat,
) -> Result<String, CliError> {
    let show_secrets = query.show_secrets;
    let one_page = query.limit.is_some();
    let mut tasks = list_tasks(b, query, one_page).await?;
    if !show_secrets {
        tasks.iter_mut().for_each(TaskView::mask_secrets);
    }
    Ok(match output {
        OutputFormat::Table => output::task_table(&tasks),
        OutputFormat::Json => output::json(&tasks),
    })
}

/// The JSON document of `--payload FILE`, if given.
fn read_payload(file: Option<&str>) -> Result<Option<serde_json::Value>, CliError> {
    match file {
        Some(file) => Ok(Some(serde_json::from_slice(&read_input(file)?).map_err(
            |e| CliError::Invalid(vec![format!("--payload: not valid JSON: {e}")]),
        )?)),
        None => Ok(None),
    }
}

/// `ax task trigger`: prints only the execution id, so that `id=$(ax task trigger ...)`
/// works.
async fn task_trigger(
    ops: &Operations<'_>,
    key: TaskKey,
    params: TriggerParams,
) -> Result<String, CliError> {
    let r = ops.trigger(key, params).await.map_err(api_error)?;
    Ok(format!("{}\n", r.execution_id))
}

/// `ax task backfill`: one line per fire (with its execution id once enqueued), and on
/// stderr whether they run or a dry run only listed them.
async fn task_backfill(
    ops: &Operations<'_>,
    name: &str,
    key: TaskKey,
    params: BackfillParams,
) -> Result<String, CliError> {
    let r = ops.backfill(key, params).await.map_err(api_error)?;
    let mut out = String::new();
    for (i, t) in r.fires.iter().enumerate() {
        let ran = if r.already_run.get(i) == Some(&true) {
            "  (ran already)"
        } else if r.pending.get(i) == Some(&true) {
            "  (requested already, pending)"
        } else {
            ""
        };
        match r.execution_ids.get(i) {
            Some(id) => out.push_str(&format!("{t}  {id}{ran}\n")),
            None => out.push_str(&format!("{t}\n")),
        }
    }
    if r.written {
        let ran = r.already_run.iter().filter(|a| **a).count();
        let pending = r.pending.iter().filter(|a| **a).count();
        let queued = r.fires.len().saturating_sub(ran + pending);
        if ran + pending == 0 {
            eprintln!("{queued} fire(s) of {name} enqueued to run now");
        } else {
            eprintln!(
                "{queued} fire(s) of {name} enqueued to run now; {ran} ran already and \
                 {pending} are pending from an earlier backfill (their executions are shown): \
                 not requested again"
            );
        }
    } else {
        eprintln!("{} fire(s) of {name} would run (dry run)", r.fires.len());
    }
    Ok(out)
}

/// `ax history`: the same checks and query as `GET /api/v1/executions`.
async fn history(config: &Config, args: HistoryArgs) -> Result<(), CliError> {
    let params = ExecutionParams {
        namespace: args.namespace,
        task: args.task,
        outcome: args.outcome,
        failed: args.failed,
        since: args.since,
        until: args.until,
        limit: Some(usize::from(args.limit)),
        continue_token: args.continue_token,
    };
    let query = params
        .resolve(ax_scheduler_core::UtcMillis::now())
        .map_err(api_error)?;
    let page = backend(config)
        .await?
        .executions(query)
        .await
        .map_err(api_error)?;
    print_stdout(&match args.output {
        OutputFormat::Table => output::executions_table(&page),
        OutputFormat::Json => output::json(&page),
    })
}

/// `ax dlq list|requeue|purge`.
async fn dlq(config: &Config, actor: &Actor, cmd: DlqCommand) -> Result<(), CliError> {
    let b = backend(config).await?;
    let ops = Operations::new(&b, actor);
    let text = match cmd {
        DlqCommand::List {
            queue,
            limit,
            output,
        } => {
            let letters = b
                .dlq_list(queue, usize::from(limit))
                .await
                .map_err(api_error)?;
            match output {
                OutputFormat::Table => output::dlq_table(&letters),
                OutputFormat::Json => output::json(&letters),
            }
        }
        DlqCommand::Requeue {
            ids,
            all,
            queue,
            use_stored,
        } => {
            let request = if all {
                DlqRequeue::All {
                    all,
                    queue,
                    use_stored,
                    requested_by: None,
                }
            } else {
                DlqRequeue::Ids {
                    ids,
                    use_stored,
                    requested_by: None,
                }
            };
            let done = ops.dlq_requeue(request).await.map_err(api_error)?;
            output::requeued_text(&done)
        }
        DlqCommand::Purge { queue } => {
            let n = ops.dlq_purge(queue).await.map_err(api_error)?;
            format!("purged {n} dead letter(s)\n")
        }
    };
    print_stdout(&text)
}

/// Who the audit log names for this CLI run: `cli:` and the operating-system user.
fn cli_actor(edge: &Edge) -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| edge.env.get(*v).filter(|u| !u.is_empty()))
        .map_or("unknown", String::as_str);
    match &edge.hostname {
        Some(host) => format!("cli:{user}@{host}"),
        None => format!("cli:{user}"),
    }
}

/// The bytes of `file`, or of stdin for `-`.
fn read_input(file: &str) -> Result<Vec<u8>, CliError> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CliError::Usage(format!("cannot read stdin: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(|e| CliError::Usage(format!("cannot read {file}: {e}")))
    }
}

/// Prints `err` on stderr the way scripts and people expect: `ax: error: ...`, one problem
/// per line for invalid input.
pub fn report(err: &CliError) {
    match err {
        CliError::Failed(e) => eprintln!("ax: error: {e:#}"),
        other => eprintln!("ax: error: {other}"),
    }
}
