//! Child processes as tests run them: to a deadline, their output as text,
//! under `mpirun` when a test needs ranks.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Waits `limit` at most for `child` (its output piped) to end, reading its
/// output meanwhile; its output. A child still running then has its threads'
/// stacks printed (with gdb, where there is one), is killed, and the test
/// fails with what it wrote: a hang is a failure that says where, never a
/// test run that does not end.
pub fn output_within(mut child: Child, limit: Duration) -> Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let stacks = Command::new("gdb")
                .args(["-p", &child.id().to_string(), "-batch"])
                .args(["-ex", "thread apply all bt"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("(no stacks: gdb: {e})"));
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {limit:?}; its threads:\n{stacks}\nits output:\n{}{}",
                String::from_utf8_lossy(&stdout.join().unwrap_or_default()),
                String::from_utf8_lossy(&stderr.join().unwrap_or_default()),
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Runs `command` to its end, `limit` at most (see [`output_within`]).
pub fn run_within(command: &mut Command, limit: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            let program = command.get_program().to_string_lossy();
            panic!("cannot start {program}: {e} (mpirun: scripts/setup.sh --with-mpi)")
        });
    output_within(child, limit)
}

/// The longest any test's process may run: far above the slowest (an MPI job
/// of a few minutes on 2 shared cores), so that only a hang reaches it.
pub const TEST_PROCESS_LIMIT: Duration = Duration::from_secs(15 * 60);

/// A command run to its end as a test runs it: to [`TEST_PROCESS_LIMIT`] at
/// most, a hang failing with the process's stacks ([`output_within`]) instead
/// of holding the test run for ever. Use it in place of `Command::output`.
pub trait RunToEnd {
    /// Runs the command to its end; its output.
    fn run_to_end(&mut self) -> Output;
}

impl RunToEnd for Command {
    fn run_to_end(&mut self) -> Output {
        run_within(self, TEST_PROCESS_LIMIT)
    }
}

/// What a process wrote: its standard output, then its standard error.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `mpirun` set to start `ranks` ranks of the program its caller adds, on
/// whatever cores there are (oversubscribed, unbound, also as root, as in a
/// container); its standard input closed.
pub fn mpirun(ranks: usize) -> Command {
    let mut command = Command::new("mpirun");
    command
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-np", &ranks.to_string()])
        .stdin(Stdio::null());
    command
}
