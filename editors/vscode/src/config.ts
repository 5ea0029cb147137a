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

/**
 * Decides how to start `kina-lsp`.  Order: an explicit `kina.server.command`, then
 * `kina.server.pythonPath -m kina_lsp`, then the `.venv` of a (trusted) workspace folder,
 * then `kina-lsp` on PATH.  Never throws: a missing interpreter shows up when the process
 * fails to start, and `describeStartFailure` then names the source that was used.
 */
export function resolveServerCommand(settings: ServerSettings, ctx: ResolveContext): ServerLaunch {
  const command = settings.command.map((part) => expandVariables(part, ctx)).filter((part) => part !== '');
  if (command.length > 0) {
    return { command: command[0], args: command.slice(1), source: 'kina.server.command' };
  }
  const python = expandVariables(settings.pythonPath, ctx);
  if (python !== '') {
    return { command: python, args: ['-m', SERVER_MODULE], source: 'kina.server.pythonPath' };
  }
  if (ctx.workspaceTrusted) {
    for (const folder of ctx.workspaceFolders) {
      const candidate = venvPython(path.join(folder, '.venv'), ctx.platform);
      if (ctx.exists(candidate)) {
        return { command: candidate, args: ['-m', SERVER_MODULE], source: 'workspace .venv' };
      }
    }
  }
  return { command: SERVER_SCRIPT, args: [], source: 'PATH' };
}

/** A command line for messages and logs; arguments with spaces are quoted. */
export function formatCommandLine(launch: Pick<ServerLaunch, 'command' | 'args'>): string {
  return [launch.command, ...launch.args].map((part) => (/\s/.test(part) ? JSON.stringify(part) : part)).join(' ');
}

/** The `kina.*` settings that the language server itself consumes. */
export interface ServerOptionsSettings {
  debounceMs: number;
  inlayHintsEnabled: boolean;
}

export const DEFAULT_DEBOUNCE_MS = 150;

/**
 * The settings object sent to the server (as `initializationOptions` and in
 * `workspace/didChangeConfiguration`), shaped like the `kina` configuration section so the
 * server reads the same keys whichever way it asks: `{diagnostics: {debounceMs}, inlayHints: {enabled}}`.
 * Out-of-range values are clamped rather than sent: a negative debounce would make no sense.
 */
export function serverSettingsPayload(s: ServerOptionsSettings): { diagnostics: { debounceMs: number }; inlayHints: { enabled: boolean } } {
  const raw = Number.isFinite(s.debounceMs) ? Math.round(s.debounceMs) : DEFAULT_DEBOUNCE_MS;
  const debounceMs = Math.min(5000, Math.max(0, raw));
  return { diagnostics: { debounceMs }, inlayHints: { enabled: s.inlayHintsEnabled !== false } };
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
  const what = `Kina: the language server did not start (\`${formatCommandLine(launch)}\`, from ${launch.source}).`;
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
