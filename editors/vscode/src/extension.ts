/**
 * The Kina extension: starts the `kina-lsp` language server for `.kina` files through
 * vscode-languageclient and wires the editor commands to the server's
 * `workspace/executeCommand` commands.
 *
 * Everything that can be decided without an editor (which command starts the server,
 * settings payload, user-facing messages) lives in `config.ts`; this file only talks to
 * VS Code.  A server that cannot start is reported with an error that says what to
 * install or set, and a status-bar item shows the server's state.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import {
  CloseAction,
  DynamicFeature,
  ErrorAction,
  ErrorHandler,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  StaticFeature,
} from 'vscode-languageclient/node';
import {
  ServerLaunch,
  StderrTail,
  describeStartFailure,
  formatCommandLine,
  parseBuildReply,
  parseMlirReply,
  resolveServerCommand,
  serverProcess,
  serverSettingsFrom,
  serverSettingsPayload,
} from './config';

/** Client id: vscode-languageclient reads `kina.trace.server` from it. */
const CLIENT_ID = 'kina';
const CLIENT_NAME = 'Kina Language Server';

/**
 * The extension registers `kina.buildAndValidate` and `kina.showMlir` itself: they must exist
 * (with a clear message) while the server is down, and they fill in the active document's
 * URI.  The client's built-in executeCommand feature would register the same command ids
 * from the server's capabilities and fail with "command already exists", so it is left out;
 * the commands reach the server with an explicit workspace/executeCommand request.
 */
class KinaLanguageClient extends LanguageClient {
  public override registerFeature(feature: StaticFeature | DynamicFeature<unknown>): void {
    if ('registrationType' in feature && feature.registrationType.method === ExecuteCommandRequest.method) {
      return;
    }
    super.registerFeature(feature);
  }

  /** Until the server runs, errors are logged only: reportStartFailure shows one message with the fix. */
  public override error(message: string, data?: unknown, showNotification: boolean | 'force' = true): void {
    super.error(message, data, this.state === State.Running ? showNotification : false);
  }
}

let client: LanguageClient | undefined;
let stdDir: string | undefined;
let starting: Promise<void> | undefined;
let output: vscode.LogOutputChannel;
let status: vscode.StatusBarItem;
let storageDir: string;

/**
 * The server's working directory: private and empty, never the workspace (see serverProcess).
 * Created with mode 0700 so that no other local user can plant modules in it.
 */
function neutralDirectory(): string {
  const dir = path.join(storageDir, 'server-cwd');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  storageDir = context.globalStorageUri.fsPath;
  output = vscode.window.createOutputChannel(CLIENT_NAME, { log: true });
  status = vscode.window.createStatusBarItem('kina.server', vscode.StatusBarAlignment.Left, 10);
  status.name = 'Kina Language Server';
  status.command = 'kina.showOutput';
  context.subscriptions.push(
    output,
    status,
    vscode.commands.registerCommand('kina.showOutput', () => output.show(true)),
    vscode.commands.registerCommand('kina.restartServer', () => restartServer()),
    vscode.commands.registerCommand('kina.buildAndValidate', (uri?: vscode.Uri) => buildAndValidate(uri)),
    // The code lenses' command: [uri, function, "function" | "gradient"] (see kina_lsp/features/lenses.py).
    vscode.commands.registerCommand('kina.validateFunction', (uri?: string, fn?: string, kind?: string) =>
      buildAndValidate(uri ? vscode.Uri.parse(uri) : undefined, 'kina.validateFunction', [fn, kind])),
    vscode.commands.registerCommand('kina.showMlir', (uri?: vscode.Uri) => showMlir(uri)),
    // The server command and interpreter are read at start; a change means a restart.
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('kina.server')) {
        void restartServer();
      }
    }),
    // Trust unlocks the workspace's own .venv and workspace-level server settings.
    vscode.workspace.onDidGrantWorkspaceTrust(() => void restartServer()),
    vscode.window.onDidChangeActiveTextEditor((editor) => void readOnlyIfStd(editor)),
  );
  await startServer();
}

export async function deactivate(): Promise<void> {
  await stopServer();
}

function readLaunch(): ServerLaunch {
  const cfg = vscode.workspace.getConfiguration('kina');
  return resolveServerCommand(
    serverSettingsFrom({ command: cfg.get<unknown>('server.command'), pythonPath: cfg.get<unknown>('server.pythonPath') }),
    {
      workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
      workspaceTrusted: vscode.workspace.isTrusted,
      platform: process.platform,
      userHome: os.homedir(),
      exists: (file) => fs.existsSync(file),
    },
  );
}

function readServerSettings(): ReturnType<typeof serverSettingsPayload> {
  const cfg = vscode.workspace.getConfiguration('kina');
  return serverSettingsPayload({
    debounceMs: cfg.get<number>('diagnostics.debounceMs', 150),
    inlayHintsEnabled: cfg.get<boolean>('inlayHints.enabled', true),
    optLevel: cfg.get<number>('validate.optLevel', 0),
  });
}

function setStatus(text: string, tooltip: string, error = false): void {
  status.text = text;
  status.tooltip = tooltip;
  status.backgroundColor = error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  status.show();
}

async function startServer(): Promise<void> {
  if (starting) {
    return starting;
  }
  starting = doStart().finally(() => {
    starting = undefined;
  });
  return starting;
}

async function doStart(): Promise<void> {
  const launch = readLaunch();
  const proc = serverProcess(process.env, neutralDirectory());
  output.appendLine(`Starting ${formatCommandLine(launch)} (from ${launch.source}) in ${proc.cwd}`);
  if (launch.warning) {
    output.appendLine(launch.warning);
    void vscode.window.showWarningMessage(`Kina: ${launch.warning}`);
  }
  setStatus('$(sync~spin) Kina', `Starting ${formatCommandLine(launch)}`);
  // No `transport`: stdio is the default, and TransportKind.stdio would append `--stdio`,
  // which kina-lsp (stdio unless --tcp) rejects.
  const serverOptions: ServerOptions = {
    command: launch.command,
    args: launch.args,
    options: proc,
  };
  // The server's stderr goes to the output channel, and its last lines into the start-failure
  // message: "No module named kina_lsp" says more than "connection got disposed".
  const stderr = new StderrTail();
  const lines = (input: NodeJS.ReadableStream, sink: (line: string) => void) =>
    readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on('line', sink);
  let running = false;
  let fallback: ErrorHandler | undefined;
  const errorHandler: ErrorHandler = {
    error: (error, message, count) => fallback?.error(error, message, count) ?? { action: ErrorAction.Shutdown },
    // A server that never came up is reported once by reportStartFailure; restarting it would
    // only repeat the failure.  A server that crashes later gets the library's bounded restarts.
    closed: () => (running && fallback ? fallback.closed() : { action: CloseAction.DoNotRestart, handled: true }),
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ language: 'kina' }],
    initializationOptions: readServerSettings(),
    // Every lens runs a build (Build & validate, Gradient check): none in Restricted Mode.
    middleware: {
      provideCodeLenses: (document, token, next) => (vscode.workspace.isTrusted ? next(document, token) : []),
    },
    // Sends workspace/didChangeConfiguration with the `kina` section when a setting changes.
    // (No `fileEvents` here: the server registers its `**/*.kina` watcher dynamically, which
    // this client supports, and gets workspace/didChangeWatchedFiles from it; a second
    // watcher here would send every change twice.)
    synchronize: { configurationSection: 'kina' },
    outputChannel: output,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    // One failed start is reported by us (with the fix); no silent restart loop.
    initializationFailedHandler: () => false,
    errorHandler,
    stdioOptions: {
      stdout: (input, channel) => lines(input, (line) => channel.info(line)),
      stderr: (input, channel) =>
        lines(input, (line) => {
          stderr.push(line);
          channel.appendLine(line);
        }),
    },
  };
  const lc = new KinaLanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions);
  fallback = lc.createDefaultErrorHandler(4);
  lc.onDidChangeState((e) => {
    if (e.newState === State.Running) {
      running = true;
      setStatus('$(check) Kina', `Kina language server running: ${formatCommandLine(launch)}`);
    } else if (e.newState === State.Stopped && client === lc) {
      setStatus('$(error) Kina', 'Kina language server stopped. Click for its output.', true);
    }
  });
  client = lc;
  try {
    await lc.start();
    output.appendLine('Kina language server running.');
    stdDir = stdPathOf(lc);
    await readOnlyIfStd(vscode.window.activeTextEditor);
  } catch (error) {
    client = undefined;
    // The exit can overtake the last stderr lines; give readline a moment to deliver them.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await lc.dispose().catch(() => undefined);
    reportStartFailure(launch, error, stderr.lines);
  }
}

/**
 * Where Kina's standard library lives (compiler/std, with the server's compiler), from the
 * server's capabilities (`experimental.kina.stdPath`, kina_lsp/protocol.py): the one place
 * that knows which compiler the server runs.
 */
function stdPathOf(lc: LanguageClient): string | undefined {
  const experimental = lc.initializeResult?.capabilities.experimental as { kina?: { stdPath?: unknown } } | undefined;
  const dir = experimental?.kina?.stdPath;
  return typeof dir === 'string' && dir ? path.resolve(dir) : undefined;
}

/**
 * A standard-library file (F12 on `nn.linear` opens compiler/std/nn.kina) opens read-only:
 * it ships with the compiler, and an edit would change every program that imports it.
 * (The server refuses renames and offers no formatting or code actions there either.)
 */
async function readOnlyIfStd(editor: vscode.TextEditor | undefined): Promise<void> {
  const doc = editor?.document;
  if (!doc || !stdDir || doc.uri.scheme !== 'file' || editor !== vscode.window.activeTextEditor) {
    return;
  }
  if (path.dirname(path.resolve(doc.uri.fsPath)) === stdDir && doc.uri.fsPath.endsWith('.kina')) {
    await vscode.commands.executeCommand('workbench.action.files.setActiveEditorReadonlyInSession');
  }
}

function reportStartFailure(launch: ServerLaunch, error: unknown, stderr: readonly string[]): void {
  const message = describeStartFailure(launch, error, stderr);
  output.appendLine(message);
  setStatus('$(error) Kina', message, true);
  void vscode.window.showErrorMessage(message, 'Open Settings', 'Show Output').then((choice) => {
    if (choice === 'Open Settings') {
      void vscode.commands.executeCommand('workbench.action.openSettings', 'kina.server');
    } else if (choice === 'Show Output') {
      output.show(true);
    }
  });
}

async function stopServer(): Promise<void> {
  const lc = client;
  client = undefined;
  if (lc) {
    await lc.stop().catch((e) => output.appendLine(`Stopping the server: ${String(e)}`));
  }
}

async function restartServer(): Promise<void> {
  await starting;
  await stopServer();
  await startServer();
}

/** The `.kina` document a command applies to: the given URI, else the active editor's. */
function targetDocument(uri?: vscode.Uri): vscode.TextDocument | undefined {
  const doc = uri
    ? vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString())
    : vscode.window.activeTextEditor?.document;
  if (!doc || doc.languageId !== 'kina') {
    void vscode.window.showWarningMessage('Kina: open a .kina file first.');
    return undefined;
  }
  return doc;
}

/**
 * Runs a server command on a document.  Returns `{result}`, or undefined when the server
 * is not running (the user has then been told, with a way to restart it).
 */
async function executeServerCommand(
  command: string,
  doc: vscode.TextDocument,
  extra: unknown[] = [],
): Promise<{ result: unknown } | undefined> {
  await starting;
  if (!client || !client.isRunning()) {
    const choice = await vscode.window.showErrorMessage(
      'Kina: the language server is not running, so this command is unavailable.',
      'Restart Server',
      'Show Output',
    );
    if (choice === 'Restart Server') {
      await restartServer();
    } else if (choice === 'Show Output') {
      output.show(true);
    }
    return undefined;
  }
  const result: unknown = await client.sendRequest(ExecuteCommandRequest.type, {
    command,
    arguments: [doc.uri.toString(), ...extra],
  });
  return { result };
}

async function buildAndValidate(uri?: vscode.Uri, command = 'kina.buildAndValidate', extra: unknown[] = []): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showWarningMessage('Kina: Build & Validate compiles and runs native code; trust this workspace first.');
    return;
  }
  const doc = targetDocument(uri);
  if (!doc) {
    return;
  }
  try {
    // The server reports progress ($/progress) and the outcome (window/showMessage, plus a
    // diagnostic on each failing function); the client logs it and mirrors it in the status bar.
    const reply = await executeServerCommand(command, doc, extra);
    if (!reply) {
      return;
    }
    const outcome = parseBuildReply(reply.result);
    output.appendLine(outcome.message);
    setStatus(outcome.ok ? '$(check) Kina' : '$(warning) Kina', outcome.message);
  } catch (error) {
    showCommandError('Build & Validate', error);
  }
}

async function showMlir(uri?: vscode.Uri): Promise<void> {
  const doc = targetDocument(uri);
  if (!doc) {
    return;
  }
  try {
    const reply = await executeServerCommand('kina.showMlir', doc);
    if (!reply) {
      return;
    }
    const mlir = parseMlirReply(reply.result);
    if (mlir === undefined) {
      showCommandError('Show MLIR', `unexpected reply ${JSON.stringify(reply.result)}`);
      return;
    }
    // A file that does not compile comes back as its diagnostics (language `text`): show them
    // in the same place, so the user sees why there is no MLIR.
    const mlirDoc = await vscode.workspace.openTextDocument({ language: mlir.language, content: mlir.content });
    await vscode.window.showTextDocument(mlirDoc, { viewColumn: vscode.ViewColumn.Beside, preview: false });
    if (!mlir.ok) {
      void vscode.window.showWarningMessage('Kina: the file does not compile; the side editor lists the errors.');
    }
  } catch (error) {
    showCommandError('Show MLIR', error);
  }
}

function showCommandError(what: string, error: unknown): void {
  const message = `Kina: ${what} failed: ${error instanceof Error ? error.message : String(error)}`;
  output.appendLine(message);
  void vscode.window.showErrorMessage(message, 'Show Output').then((c) => c && output.show(true));
}
