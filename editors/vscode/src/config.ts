/**
 * Pure logic of the Kina extension: which command starts the language server, how the
 * `kina.*` settings map onto what the server reads, and the text shown to the user when
 * the server cannot start or a server command answers.
 *
 * Nothing here imports `vscode`, so `node --test` exercises it without an editor; the
 * extension passes in what it reads from VS Code (settings, workspace folders, trust,
 * a file-existence check).
 */
import * as path from 'node:path';

/** The `kina.server.*` settings, as read from the configuration (unset = empty). */
export interface ServerSettings {
  /** `kina.server.command`: the full command line; wins over everything else. */
  command: readonly string[];
  /** `kina.server.pythonPath`: interpreter of the environment where Kina is installed. */
  pythonPath: string;
}

/**
 * Reads the server settings from raw configuration values, which come from hand-edited
 * JSON and may have any type: a string `kina.server.command` is taken as one program path
 * (not split on spaces: paths may contain them), non-strings are dropped.
 */
export function serverSettingsFrom(raw: { command: unknown; pythonPath: unknown }): ServerSettings {
  let command: string[] = [];
  if (Array.isArray(raw.command)) {
    command = raw.command.filter((part): part is string => typeof part === 'string');
  } else if (typeof raw.command === 'string') {
    command = [raw.command];
  }
  return { command, pythonPath: typeof raw.pythonPath === 'string' ? raw.pythonPath : '' };
}

/** What the extension knows about its surroundings when it resolves the server command. */
export interface ResolveContext {
  /** File-system paths of the workspace folders, first one first. */
  workspaceFolders: readonly string[];
  /** False in an untrusted workspace: then a workspace's own `.venv` must not be executed. */
  workspaceTrusted: boolean;
  /** `process.platform`: decides where a venv keeps its interpreter. */
  platform: NodeJS.Platform;
  /** The user's home directory, for `~` and `${userHome}`. */
  userHome: string;
  /** Whether a file exists (injected so that tests need no real venv). */
  exists: (file: string) => boolean;
}

/** Where the resolved command came from, in the order they are tried. */
export type ServerSource = 'kina.server.command' | 'kina.server.pythonPath' | 'workspace .venv' | 'PATH';

export interface ServerLaunch {
  command: string;
  args: string[];
  source: ServerSource;
  /** Set when a configured command was passed over (it points into an untrusted workspace). */
  warning?: string;
}

/** The module the Python interpreter runs (`python -m kina_lsp`). */
export const SERVER_MODULE = 'kina_lsp';
/** The console script installed by `pip install` of the Kina project. */
export const SERVER_SCRIPT = 'kina-lsp';

/**
 * Expands `${workspaceFolder}`, `${userHome}` and a leading `~` the way VS Code users expect
 * in path settings.  `${workspaceFolder}` without a workspace is left as it is, so the error
 * message later shows the user exactly what was configured.
 */
export function expandVariables(value: string, ctx: Pick<ResolveContext, 'workspaceFolders' | 'userHome'>): string {
  let out = value.trim();
  if (out === '~' || out.startsWith('~/')) {
    out = ctx.userHome + out.slice(1);
  }
  out = out.replace(/\$\{userHome\}/g, ctx.userHome);
  const folder = ctx.workspaceFolders[0];
  if (folder !== undefined) {
    out = out.replace(/\$\{workspaceFolder\}/g, folder);
  }
  return out;
}

/** The interpreter inside a virtual environment directory, per platform. */
export function venvPython(venvDir: string, platform: NodeJS.Platform): string {
  return platform === 'win32' ? path.win32.join(venvDir, 'Scripts', 'python.exe') : path.posix.join(venvDir, 'bin', 'python');
}

/** The path module of the platform the paths come from. */
function pathsOf(platform: NodeJS.Platform): path.PlatformPath {
  return platform === 'win32' ? path.win32 : path.posix;
}

/**
 * A program path as spawn should see it: absolute paths and bare names (looked up on PATH)
 * as they are; a relative path with a directory part (`.venv/bin/python`) against the first
 * workspace folder, which is what it meant when the server started there.  (The server now
 * starts in a neutral directory, so spawn must never resolve a relative path itself.)
 */
export function resolveProgram(program: string, ctx: Pick<ResolveContext, 'workspaceFolders' | 'platform'>): string {
  const p = pathsOf(ctx.platform);
  const hasDir = program.includes('/') || (ctx.platform === 'win32' && program.includes('\\'));
  if (!hasDir || p.isAbsolute(program) || ctx.workspaceFolders.length === 0) {
    return program;
  }
  return p.resolve(ctx.workspaceFolders[0], program);
}

/** Whether `file` lies inside one of the workspace folders. */
export function insideWorkspace(file: string, ctx: Pick<ResolveContext, 'workspaceFolders' | 'platform'>): boolean {
  const p = pathsOf(ctx.platform);
  if (!p.isAbsolute(file)) {
    return false;
  }
  return ctx.workspaceFolders.some((folder) => {
    const rel = p.relative(p.resolve(folder), p.resolve(file));
    return rel === '' || (!rel.startsWith('..') && !p.isAbsolute(rel));
  });
}

/**
 * Why a configured command must not run in this workspace, or undefined.  In an untrusted
 * workspace nothing that the workspace supplies may be executed: a `${workspaceFolder}`
 * anywhere in the command line (an argument can be a script the interpreter runs), or a
 * program that lies inside a workspace folder (a relative path, or an absolute path there).
 */
function untrustedReason(setting: string, raw: readonly string[], program: string, ctx: ResolveContext): string | undefined {
  if (ctx.workspaceTrusted) {
    return undefined;
  }
  const mentionsFolder = raw.some((part) => /\$\{workspaceFolder(Basename)?\}/.test(part));
  if (!mentionsFolder && !insideWorkspace(program, ctx)) {
    return undefined;
  }
  return `\`${setting}\` (${formatCommandLine({ command: raw[0] ?? '', args: raw.slice(1) })}) points into this untrusted workspace, so it is not used in Restricted Mode: trust the workspace to use it, or set an interpreter outside the workspace.`;
}

/**
 * Decides how to start `kina-lsp`.  Order: an explicit `kina.server.command`, then
 * `kina.server.pythonPath -m kina_lsp`, then the `.venv` of a (trusted) workspace folder,
 * then `kina-lsp` on PATH.  In an untrusted workspace a setting that would run something
 * from the workspace is passed over (and `warning` says so).  Never throws: a missing
 * interpreter shows up when the process fails to start, and `describeStartFailure` then
 * names the source that was used.
 */
export function resolveServerCommand(settings: ServerSettings, ctx: ResolveContext): ServerLaunch {
  const warnings: string[] = [];
  const withWarning = (launch: ServerLaunch): ServerLaunch =>
    warnings.length > 0 ? { ...launch, warning: warnings.join(' ') } : launch;
  const rawCommand = settings.command.filter((part) => part.trim() !== '');
  const command = rawCommand.map((part) => expandVariables(part, ctx));
  if (command.length > 0) {
    const program = resolveProgram(command[0], ctx);
    const reason = untrustedReason('kina.server.command', rawCommand, program, ctx);
    if (reason === undefined) {
      return withWarning({ command: program, args: command.slice(1), source: 'kina.server.command' });
    }
    warnings.push(reason);
  }
  const python = expandVariables(settings.pythonPath, ctx);
  if (python !== '') {
    const program = resolveProgram(python, ctx);
    const reason = untrustedReason('kina.server.pythonPath', [settings.pythonPath.trim()], program, ctx);
    if (reason === undefined) {
      return withWarning({ command: program, args: ['-m', SERVER_MODULE], source: 'kina.server.pythonPath' });
    }
    warnings.push(reason);
  }
  if (ctx.workspaceTrusted) {
    for (const folder of ctx.workspaceFolders) {
      const candidate = venvPython(path.join(folder, '.venv'), ctx.platform);
      if (ctx.exists(candidate)) {
        return withWarning({ command: candidate, args: ['-m', SERVER_MODULE], source: 'workspace .venv' });
      }
    }
  }
  return withWarning({ command: SERVER_SCRIPT, args: [], source: 'PATH' });
}

/**
 * The environment and working directory of the server process.  `python -m` puts the
 * working directory first on `sys.path`, so a server started in the workspace would import
 * the workspace's own `kina_lsp/`, `compiler/` or `numpy.py`, trusted or not.  So the server
 * starts in `neutralDir` (a private, empty directory of the extension) and with
 * PYTHONSAFEPATH=1 (Python 3.11+ then adds no such directory at all; older versions ignore
 * it, and the neutral directory covers them).  Both also apply to a `kina.server.command`.
 */
export function serverProcess(baseEnv: NodeJS.ProcessEnv, neutralDir: string): { cwd: string; env: NodeJS.ProcessEnv } {
  return { cwd: neutralDir, env: { ...baseEnv, PYTHONUNBUFFERED: '1', PYTHONSAFEPATH: '1' } };
}

/** A command line for messages and logs; arguments with spaces are quoted. */
export function formatCommandLine(launch: Pick<ServerLaunch, 'command' | 'args'>): string {
  return [launch.command, ...launch.args].map((part) => (/\s/.test(part) ? JSON.stringify(part) : part)).join(' ');
}

/** The `kina.*` settings that the language server itself consumes. */
export interface ServerOptionsSettings {
  debounceMs: number;
  inlayHintsEnabled: boolean;
  /** the -O level of Build & validate (0-3) */
  optLevel?: number;
}

export const DEFAULT_DEBOUNCE_MS = 150;

/**
 * The settings object sent to the server (as `initializationOptions` and in
 * `workspace/didChangeConfiguration`), shaped like the `kina` configuration section so the
 * server reads the same keys whichever way it asks: `{diagnostics: {debounceMs}, inlayHints: {enabled},
 * validate: {optLevel}}`.
 * Out-of-range values are clamped rather than sent: a negative debounce would make no sense.
 */
export interface ServerSettingsPayload {
  diagnostics: { debounceMs: number };
  inlayHints: { enabled: boolean };
  validate: { optLevel: number };
}

function clampInt(value: number | undefined, low: number, high: number, fallback: number): number {
  const raw = value !== undefined && Number.isFinite(value) ? Math.round(value) : fallback;
  return Math.min(high, Math.max(low, raw));
}

export function serverSettingsPayload(s: ServerOptionsSettings): ServerSettingsPayload {
  return {
    diagnostics: { debounceMs: clampInt(s.debounceMs, 0, 5000, DEFAULT_DEBOUNCE_MS) },
    inlayHints: { enabled: s.inlayHintsEnabled !== false },
    validate: { optLevel: clampInt(s.optLevel, 0, 3, 0) },
  };
}

/** Keeps the last lines of the server's stderr, so a start failure can quote the real reason. */
export class StderrTail {
  private readonly kept: string[] = [];

  constructor(private readonly max = 20) {}

  push(line: string): void {
    this.kept.push(line);
    if (this.kept.length > this.max) {
      this.kept.shift();
    }
  }

  get lines(): readonly string[] {
    return this.kept;
  }

  clear(): void {
    this.kept.length = 0;
  }
}

/** The Python errors that mean "this interpreter has no Kina installed". */
const NOT_INSTALLED = /No module named '?(kina_lsp|compiler|pygls|lsprotocol|lark)'?/;

/**
 * The error shown when the server process cannot be started or dies during start-up.
 * It names the command that was tried and where it came from, quotes the reason (the last
 * line the server wrote to stderr, else the spawn error), and says what to install or set:
 * the fix differs between "no such program", "interpreter without Kina", and anything else.
 */
export function describeStartFailure(launch: ServerLaunch, error: unknown, stderr: readonly string[] = []): string {
  const what = `Kina: the language server did not start (\`${formatCommandLine(launch)}\`, from ${launch.source}).${launch.warning ? ` ${launch.warning}` : ''}`;
  const lastLine = [...stderr].reverse().find((l) => l.trim() !== '')?.trim();
  const spawnError = errorText(error);
  const reason = lastLine ?? spawnError;
  const missingProgram = lastLine === undefined && /ENOENT|not found|no such file/i.test(spawnError);
  const notInstalled = stderr.some((l) => NOT_INSTALLED.test(l));
  return `${what} ${startFailureFix(launch, missingProgram, notInstalled)}${reason ? ` (${reason})` : ''}`;
}

function startFailureFix(launch: ServerLaunch, missingProgram: boolean, notInstalled: boolean): string {
  const viaPython = launch.source === 'kina.server.pythonPath' || launch.source === 'workspace .venv';
  if (missingProgram && launch.source === 'PATH') {
    return 'No `kina-lsp` on PATH: set `kina.server.pythonPath` to the Python of the environment where Kina is installed (e.g. `<kina checkout>/.venv/bin/python`), or install Kina with `pip install -e <kina checkout>`.';
  }
  if (missingProgram && launch.source === 'kina.server.command') {
    return 'The program in `kina.server.command` does not exist: fix the path or clear the setting.';
  }
  if (missingProgram) {
    return `The interpreter \`${launch.command}\` does not exist: set \`kina.server.pythonPath\` to the Python of the environment where Kina is installed.`;
  }
  if (notInstalled) {
    const python = viaPython ? launch.command : 'python';
    return `Kina is not installed in that environment: run \`${python} -m pip install -e <kina checkout>\` (or \`make setup\` in the checkout), or set \`kina.server.pythonPath\` to an interpreter that has it.`;
  }
  return viaPython
    ? 'The server exited during start-up; its output is in the Kina Language Server channel. Check `kina.server.pythonPath`.'
    : 'The server exited during start-up; its output is in the Kina Language Server channel. Check `kina.server.command` / `kina.server.pythonPath`.';
}

function errorText(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
  }
  return error === undefined || error === null ? '' : String(error);
}

/**
 * The reply of the server's `kina.buildAndValidate`: `{ok, message, failing, functions}`.
 * The server also shows `message` itself (window/showMessage) and puts a diagnostic on each
 * failing function, so the client only needs the outcome for its log and status bar.
 */
export interface BuildOutcome {
  ok: boolean;
  message: string;
}

export function parseBuildReply(result: unknown): BuildOutcome {
  if (result !== null && typeof result === 'object') {
    const r = result as Record<string, unknown>;
    if (typeof r.ok === 'boolean' && typeof r.message === 'string') {
      return { ok: r.ok, message: r.message };
    }
  }
  return { ok: false, message: `Kina: unexpected reply to kina.buildAndValidate: ${JSON.stringify(result)}` };
}

/**
 * The reply of the server's `kina.showMlir`: `{language, content, ok, title}`.  `language` is
 * `mlir` with the module, or `text` with the rendered diagnostics when the file does not
 * compile; both are worth opening.  Anything else is reported as an unexpected reply.
 */
export interface MlirReply {
  language: string;
  content: string;
  ok: boolean;
}

export function parseMlirReply(result: unknown): MlirReply | undefined {
  if (result !== null && typeof result === 'object') {
    const r = result as Record<string, unknown>;
    if (typeof r.content === 'string') {
      const language = typeof r.language === 'string' && r.language !== '' ? r.language : 'mlir';
      return { language, content: r.content, ok: r.ok !== false };
    }
  }
  return undefined;
}
