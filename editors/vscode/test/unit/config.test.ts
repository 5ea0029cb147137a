/**
 * Unit tests of the extension's pure logic (src/config.ts) with Node's own test runner:
 * server command resolution in every precedence case, variable expansion, the settings
 * payload, and the messages shown on start failure and for server command replies.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ResolveContext,
  StderrTail,
  describeStartFailure,
  expandVariables,
  formatCommandLine,
  parseBuildReply,
  parseMlirReply,
  insideWorkspace,
  resolveProgram,
  resolveServerCommand,
  serverProcess,
  serverSettingsFrom,
  serverSettingsPayload,
  venvPython,
} from '../../src/config';

/** A context with the given existing files; trusted, Linux, one workspace folder by default. */
function ctx(existing: string[] = [], over: Partial<ResolveContext> = {}): ResolveContext {
  const files = new Set(existing);
  return {
    workspaceFolders: ['/ws/proj'],
    workspaceTrusted: true,
    platform: 'linux',
    userHome: '/home/ada',
    exists: (f) => files.has(f),
    ...over,
  };
}

const NONE = { command: [] as string[], pythonPath: '' };

describe('resolveServerCommand', () => {
  it('prefers an explicit kina.server.command over everything else', () => {
    const launch = resolveServerCommand(
      { command: ['/opt/kina/bin/kina-lsp', '--log-level', 'debug'], pythonPath: '/usr/bin/python3' },
      ctx(['/ws/proj/.venv/bin/python']),
    );
    assert.deepEqual(launch, { command: '/opt/kina/bin/kina-lsp', args: ['--log-level', 'debug'], source: 'kina.server.command' });
  });

  it('runs `pythonPath -m kina_lsp` when only the interpreter is set', () => {
    const launch = resolveServerCommand({ command: [], pythonPath: '/work/main/.venv/bin/python' }, ctx(['/ws/proj/.venv/bin/python']));
    assert.deepEqual(launch, { command: '/work/main/.venv/bin/python', args: ['-m', 'kina_lsp'], source: 'kina.server.pythonPath' });
  });

  it('ignores an empty or blank command array and falls through to pythonPath', () => {
    const launch = resolveServerCommand({ command: ['', '  '], pythonPath: '~/kina/.venv/bin/python' }, ctx());
    assert.equal(launch.source, 'kina.server.pythonPath');
    assert.equal(launch.command, '/home/ada/kina/.venv/bin/python');
  });

  it('finds the .venv of the first workspace folder that has one', () => {
    const launch = resolveServerCommand(NONE, ctx(['/ws/b/.venv/bin/python'], { workspaceFolders: ['/ws/a', '/ws/b'] }));
    assert.deepEqual(launch, { command: '/ws/b/.venv/bin/python', args: ['-m', 'kina_lsp'], source: 'workspace .venv' });
  });

  it('uses the Windows venv layout on win32', () => {
    const launch = resolveServerCommand(NONE, ctx(['C:\\ws\\.venv\\Scripts\\python.exe'], { workspaceFolders: ['C:\\ws'], platform: 'win32' }));
    assert.equal(launch.source, 'workspace .venv');
    assert.equal(launch.command, 'C:\\ws\\.venv\\Scripts\\python.exe');
  });

  it('never executes a workspace .venv in an untrusted workspace', () => {
    const launch = resolveServerCommand(NONE, ctx(['/ws/proj/.venv/bin/python'], { workspaceTrusted: false }));
    assert.deepEqual(launch, { command: 'kina-lsp', args: [], source: 'PATH' });
  });

  it('falls back to kina-lsp on PATH when nothing is configured or found', () => {
    assert.deepEqual(resolveServerCommand(NONE, ctx([], { workspaceFolders: [] })), { command: 'kina-lsp', args: [], source: 'PATH' });
  });

  it('expands ${workspaceFolder} in every part of the command', () => {
    const launch = resolveServerCommand({ command: ['${workspaceFolder}/.venv/bin/kina-lsp', '--root=${workspaceFolder}'], pythonPath: '' }, ctx());
    assert.equal(launch.command, '/ws/proj/.venv/bin/kina-lsp');
    assert.deepEqual(launch.args, ['--root=/ws/proj']);
  });
});

describe('untrusted workspaces run nothing of the workspace', () => {
  const untrusted = (existing: string[] = []) => ctx(existing, { workspaceTrusted: false });

  it('does not expand ${workspaceFolder} in a user-level pythonPath: PATH is used, with a warning', () => {
    const launch = resolveServerCommand({ command: [], pythonPath: '${workspaceFolder}/.venv/bin/python' }, untrusted(['/ws/proj/.venv/bin/python']));
    assert.equal(launch.source, 'PATH');
    assert.equal(launch.command, 'kina-lsp');
    assert.match(launch.warning ?? '', /kina\.server\.pythonPath.*untrusted workspace.*Restricted Mode/);
  });

  it('passes over a command with ${workspaceFolder} in any argument', () => {
    const launch = resolveServerCommand({ command: ['/usr/bin/python3', '${workspaceFolder}/serve.py'], pythonPath: '/opt/kina/bin/python' }, untrusted());
    assert.equal(launch.source, 'kina.server.pythonPath');
    assert.equal(launch.command, '/opt/kina/bin/python');
    assert.match(launch.warning ?? '', /kina\.server\.command/);
  });

  it('passes over an interpreter that lies inside the workspace, absolute or relative', () => {
    for (const pythonPath of ['/ws/proj/env/bin/python', '.venv/bin/python', './tools/../.venv/bin/python']) {
      const launch = resolveServerCommand({ command: [], pythonPath }, untrusted());
      assert.equal(launch.source, 'PATH', pythonPath);
      assert.ok(launch.warning, pythonPath);
    }
  });

  it('still uses an interpreter outside the workspace, and ${userHome}', () => {
    const launch = resolveServerCommand({ command: [], pythonPath: '${userHome}/kina/.venv/bin/python' }, untrusted());
    assert.deepEqual(launch, { command: '/home/ada/kina/.venv/bin/python', args: ['-m', 'kina_lsp'], source: 'kina.server.pythonPath' });
  });

  it('names the passed-over setting when the fallback fails to start too', () => {
    const launch = resolveServerCommand({ command: [], pythonPath: '${workspaceFolder}/py' }, untrusted());
    const message = describeStartFailure(launch, Object.assign(new Error('spawn kina-lsp ENOENT'), { code: 'ENOENT' }));
    assert.match(message, /points into this untrusted workspace/);
    assert.match(message, /No `kina-lsp` on PATH/);
  });

  it('a trusted workspace resolves a relative interpreter against its folder', () => {
    const launch = resolveServerCommand({ command: [], pythonPath: '.venv/bin/python' }, ctx());
    assert.deepEqual(launch, { command: '/ws/proj/.venv/bin/python', args: ['-m', 'kina_lsp'], source: 'kina.server.pythonPath' });
  });
});

describe('resolveProgram, insideWorkspace and serverProcess', () => {
  const c = { workspaceFolders: ['/ws/proj'], platform: 'linux' as NodeJS.Platform };
  it('leaves bare names (PATH) and absolute paths alone', () => {
    assert.equal(resolveProgram('python3', c), 'python3');
    assert.equal(resolveProgram('/usr/bin/python3', c), '/usr/bin/python3');
    assert.equal(resolveProgram('bin/python', c), '/ws/proj/bin/python');
  });
  it('tells inside from outside, also for a sibling with a common prefix', () => {
    assert.ok(insideWorkspace('/ws/proj/.venv/bin/python', c));
    assert.ok(insideWorkspace('/ws/proj', c));
    assert.ok(!insideWorkspace('/ws/project2/bin/python', c));
    assert.ok(!insideWorkspace('/ws/proj/../other/python', c));
    assert.ok(insideWorkspace('C:\\ws\\proj\\py.exe', { workspaceFolders: ['C:\\ws\\proj'], platform: 'win32' }));
  });
  it('starts the server in the neutral directory with PYTHONSAFEPATH=1, keeping the environment', () => {
    const proc = serverProcess({ PATH: '/usr/bin', HOME: '/home/ada' }, '/home/ada/.kina/server-cwd');
    assert.equal(proc.cwd, '/home/ada/.kina/server-cwd');
    assert.deepEqual(proc.env, { PATH: '/usr/bin', HOME: '/home/ada', PYTHONUNBUFFERED: '1', PYTHONSAFEPATH: '1' });
  });
});

describe('serverSettingsFrom', () => {
  it('passes well-typed settings through', () => {
    assert.deepEqual(serverSettingsFrom({ command: ['/k/kina-lsp', '--log-level', 'debug'], pythonPath: '/p/python' }), {
      command: ['/k/kina-lsp', '--log-level', 'debug'],
      pythonPath: '/p/python',
    });
  });
  it('takes a string command as one program path, spaces included', () => {
    assert.deepEqual(serverSettingsFrom({ command: '/My Tools/kina-lsp', pythonPath: undefined }).command, ['/My Tools/kina-lsp']);
  });
  it('drops values of the wrong type instead of failing', () => {
    assert.deepEqual(serverSettingsFrom({ command: ['/k/kina-lsp', 3, null], pythonPath: 42 }), { command: ['/k/kina-lsp'], pythonPath: '' });
    assert.deepEqual(serverSettingsFrom({ command: undefined, pythonPath: undefined }), { command: [], pythonPath: '' });
  });
});

describe('expandVariables', () => {
  const c = { workspaceFolders: ['/ws/proj'], userHome: '/home/ada' };
  it('expands ~, ${userHome} and ${workspaceFolder}', () => {
    assert.equal(expandVariables('~/venv/bin/python', c), '/home/ada/venv/bin/python');
    assert.equal(expandVariables('~', c), '/home/ada');
    assert.equal(expandVariables('${userHome}/x:${workspaceFolder}/y', c), '/home/ada/x:/ws/proj/y');
  });
  it('leaves ~user and ${workspaceFolder} without a workspace alone', () => {
    assert.equal(expandVariables('~bob/python', c), '~bob/python');
    assert.equal(expandVariables('${workspaceFolder}/py', { workspaceFolders: [], userHome: '/h' }), '${workspaceFolder}/py');
  });
  it('trims surrounding whitespace (a pasted path)', () => {
    assert.equal(expandVariables('  /usr/bin/python3 \n', c), '/usr/bin/python3');
  });
});

describe('venvPython and formatCommandLine', () => {
  it('knows both venv layouts', () => {
    assert.equal(venvPython('/p/.venv', 'linux'), '/p/.venv/bin/python');
    assert.equal(venvPython('/p/.venv', 'darwin'), '/p/.venv/bin/python');
    assert.equal(venvPython('C:\\p\\.venv', 'win32'), 'C:\\p\\.venv\\Scripts\\python.exe');
  });
  it('quotes arguments with spaces', () => {
    assert.equal(formatCommandLine({ command: '/my env/python', args: ['-m', 'kina_lsp'] }), '"/my env/python" -m kina_lsp');
  });
});

describe('serverSettingsPayload', () => {
  it('nests the settings like the `kina` configuration section', () => {
    assert.deepEqual(serverSettingsPayload({ debounceMs: 300, inlayHintsEnabled: false, optLevel: 2 }), {
      diagnostics: { debounceMs: 300 },
      inlayHints: { enabled: false },
      validate: { optLevel: 2 },
    });
  });
  it('sends a Build & validate level of 0-3, 0 when unset or not a number', () => {
    const level = (optLevel?: number) => serverSettingsPayload({ debounceMs: 0, inlayHintsEnabled: true, optLevel }).validate.optLevel;
    assert.deepEqual([level(), level(3), level(7), level(-1), level(Number.NaN), level(1.4)], [0, 3, 3, 0, 0, 1]);
  });
  it('clamps and rounds the debounce, and defaults a non-number', () => {
    assert.equal(serverSettingsPayload({ debounceMs: -5, inlayHintsEnabled: true }).diagnostics.debounceMs, 0);
    assert.equal(serverSettingsPayload({ debounceMs: 99999, inlayHintsEnabled: true }).diagnostics.debounceMs, 5000);
    assert.equal(serverSettingsPayload({ debounceMs: 12.6, inlayHintsEnabled: true }).diagnostics.debounceMs, 13);
    assert.equal(serverSettingsPayload({ debounceMs: Number.NaN, inlayHintsEnabled: true }).diagnostics.debounceMs, 150);
  });
});

describe('describeStartFailure', () => {
  const enoent = (cmd: string) => Object.assign(new Error(`spawn ${cmd} ENOENT`), { code: 'ENOENT' });
  const closed = new Error('Pending response rejected since connection got disposed');
  const py = { command: '/usr/bin/python3', args: ['-m', 'kina_lsp'], source: 'kina.server.pythonPath' as const };

  it('says the configured interpreter does not exist and which setting to change', () => {
    const msg = describeStartFailure({ ...py, command: '/nope/python' }, enoent('/nope/python'));
    assert.match(msg, /did not start \(`\/nope\/python -m kina_lsp`, from kina.server.pythonPath\)/);
    assert.match(msg, /`\/nope\/python` does not exist: set `kina.server.pythonPath`/);
    assert.match(msg, /\(spawn \/nope\/python ENOENT\)$/);
  });

  it('tells how to install Kina when the interpreter has no kina_lsp, quoting Python', () => {
    const stderr = ['/usr/bin/python3: No module named kina_lsp'];
    const msg = describeStartFailure(py, closed, stderr);
    assert.match(msg, /Kina is not installed in that environment: run `\/usr\/bin\/python3 -m pip install -e <kina checkout>`/);
    assert.match(msg, /\(\/usr\/bin\/python3: No module named kina_lsp\)$/);
  });

  it('recognises a half-installed environment (a dependency missing)', () => {
    const stderr = ['Traceback (most recent call last):', '  File "x.py", line 1', "ModuleNotFoundError: No module named 'pygls'", ''];
    const msg = describeStartFailure({ command: '/ws/.venv/bin/python', args: ['-m', 'kina_lsp'], source: 'workspace .venv' }, closed, stderr);
    assert.match(msg, /not installed in that environment: run `\/ws\/.venv\/bin\/python -m pip install/);
    assert.match(msg, /\(ModuleNotFoundError: No module named 'pygls'\)$/);
  });

  it('quotes the last stderr line for any other start-up crash', () => {
    const stderr = ['usage: kina-lsp [-h] [--tcp]', 'kina-lsp: error: unrecognized arguments: --bogus'];
    const msg = describeStartFailure({ command: 'kina-lsp', args: ['--bogus'], source: 'kina.server.command' }, closed, stderr);
    assert.match(msg, /exited during start-up/);
    assert.match(msg, /\(kina-lsp: error: unrecognized arguments: --bogus\)$/);
  });

  it('points at the settings when kina-lsp is not on PATH', () => {
    const msg = describeStartFailure({ command: 'kina-lsp', args: [], source: 'PATH' }, enoent('kina-lsp'));
    assert.match(msg, /No `kina-lsp` on PATH: set `kina.server.pythonPath`/);
  });

  it('blames kina.server.command when its program is missing', () => {
    const msg = describeStartFailure({ command: '/x/kina-lsp', args: [], source: 'kina.server.command' }, enoent('/x/kina-lsp'));
    assert.match(msg, /program in `kina.server.command` does not exist/);
  });
});

describe('StderrTail', () => {
  it('keeps only the last lines', () => {
    const tail = new StderrTail(2);
    for (const l of ['a', 'b', 'c']) tail.push(l);
    assert.deepEqual(tail.lines, ['b', 'c']);
    tail.clear();
    assert.deepEqual(tail.lines, []);
  });
});

describe('server command replies', () => {
  it('reads {ok, message} from kina.buildAndValidate', () => {
    const reply = { ok: true, message: 'Kina: build & validate passed (2/2 functions match the interpreter)', failing: {}, functions: { attn: true } };
    assert.deepEqual(parseBuildReply(reply), { ok: true, message: reply.message });
    assert.deepEqual(parseBuildReply({ ok: false, message: 'Kina: build failed: [E201] ...', failing: {} }), {
      ok: false,
      message: 'Kina: build failed: [E201] ...',
    });
  });
  it('reports a reply of another shape instead of guessing', () => {
    for (const bad of [null, 'built', { ok: 'yes', message: 'x' }, { ok: true }]) {
      const outcome = parseBuildReply(bad);
      assert.equal(outcome.ok, false);
      assert.match(outcome.message, /unexpected reply to kina.buildAndValidate/);
    }
  });
  it('reads MLIR, or the diagnostics text when the file does not compile', () => {
    assert.deepEqual(parseMlirReply({ language: 'mlir', content: 'module {}', ok: true, title: 'a.mlir' }), { language: 'mlir', content: 'module {}', ok: true });
    assert.deepEqual(parseMlirReply({ language: 'text', content: 'a.kina:3:5: error', ok: false }), { language: 'text', content: 'a.kina:3:5: error', ok: false });
    assert.equal(parseMlirReply({ content: 'module {}' })?.language, 'mlir');
  });
  it('rejects a reply without content', () => {
    assert.equal(parseMlirReply('module {}'), undefined);
    assert.equal(parseMlirReply({ language: 'mlir' }), undefined);
    assert.equal(parseMlirReply(null), undefined);
  });
});
