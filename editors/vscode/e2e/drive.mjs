/**
 * Playwright driver for the Kina extension's end-to-end test (started by run.sh).
 *
 * --mode trusted (default) acts like a user in code-server: opens the example with Quick
 * Open, waits for the language server's status-bar item, hovers a `let`, breaks a shape and
 * reads the Problems view, runs Build & Validate from the Command Palette and from a code
 * lens, folds a function (features.mjs), runs Show MLIR, and
 * finally sets `kina.server.pythonPath` (in the Settings editor) to a missing interpreter to
 * see the start-failure message.
 *
 * --mode restricted opens a folder that is not trusted (Restricted Mode): the server still
 * starts from the user's interpreter and answers hovers, Build & Validate is not offered,
 * and a user-level `kina.server.pythonPath` of `${workspaceFolder}/.venv/bin/python` is
 * passed over with a warning (the server then starts from PATH).  run.sh plants hostile
 * Python files in both folders and checks afterwards that none of them ran.
 *
 * Each step saves a screenshot; a failing step saves `<step>-failed.png` and exits non-zero.
 *
 * Usage: node drive.mjs --harness DIR --url URL --file NAME --out DIR [--mode trusted|restricted]
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { lensAndFoldingChecks, noLensesInRestrictedMode, refactorChecks } from './features.mjs';
import { crossFileChecks } from './modules.mjs';

const { values: opt } = parseArgs({
  options: {
    harness: { type: 'string' },
    url: { type: 'string' },
    file: { type: 'string' },
    out: { type: 'string' },
    mode: { type: 'string', default: 'trusted' },
  },
});
// playwright-core lives in the harness cache, not in the repository.
const { chromium } = createRequire(path.join(opt.harness, 'package.json'))('playwright-core');

const EXPECTED_HOVER = 'Tensor[F32, [1, 4, 4], @host]';
const t0 = Date.now();
const log = (msg) => console.log(`[drive ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kina-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.on('pageerror', (e) => log(`pageerror: ${e.message}`));

let stepName = 'start';
async function step(name, body) {
  stepName = name;
  const s = Date.now();
  await body();
  await page.screenshot({ path: path.join(opt.out, `${name}.png`) });
  log(`ok  ${name} (${Date.now() - s} ms)`);
}

/** Opens a quick-input (Command Palette, Quick Open, Go to Line), retrying while keybindings settle. */
async function withQuickInput(key, text, expectRow) {
  for (let attempt = 1; ; attempt++) {
    try {
      await page.keyboard.press(key);
      const input = page.locator('.quick-input-widget .quick-input-box input');
      await input.waitFor({ state: 'visible', timeout: 5000 });
      await input.fill(text);
      if (expectRow) {
        await page.locator('.quick-input-list .monaco-list-row', { hasText: expectRow }).first().waitFor({ timeout: 10000 });
      }
      await page.keyboard.press('Enter');
      return;
    } catch (e) {
      if (attempt >= 3) throw e;
      await page.keyboard.press('Escape');
    }
  }
}

const runCommand = (title) => withQuickInput('F1', `>${title}`, title);
const quickOpen = (fileName) => withQuickInput('Control+P', fileName, fileName);

const editor = page.locator('.editor-instance .monaco-editor').first();
const statusItem = (codicon) => page.locator(`.statusbar-item:has(.codicon-${codicon}):has-text("Kina")`).first();
const toast = (text) => page.locator('.notifications-toasts .notification-toast', { hasText: text }).first();
const oneLine = async (locator, n = 240) => (await locator.textContent()).replace(/\s+/g, ' ').slice(0, n);

/** The 1-based line and column of the first occurrence of `needle` in the opened file. */
function position(needle) {
  const folder = new URL(opt.url).searchParams.get('folder');
  const lines = fs.readFileSync(path.join(folder, opt.file), 'utf8').split('\n');
  const line = lines.findIndex((l) => l.includes(needle));
  if (line < 0) throw new Error(`"${needle}" not in ${opt.file}`);
  return { line: line + 1, column: lines[line].indexOf(needle) + 1 };
}

async function focusEditor() {
  await editor.click({ position: { x: 300, y: 10 } });
}

/** Opens the workbench and the example file; the server is up once the status item shows a check. */
async function openExample() {
  await page.goto(opt.url, { waitUntil: 'domcontentloaded' });
  await page.locator('.monaco-workbench').waitFor({ timeout: 60000 });
  await page.locator(`.explorer-folders-view .monaco-list-row[aria-label*="${opt.file}"]`).waitFor({ timeout: 60000 });
  await page.waitForTimeout(1000); // keybindings are live only once the workbench has restored
  await quickOpen(opt.file);
  await page.locator(`.tab.active[aria-label*="${opt.file}"]`).waitFor({ timeout: 30000 });
  // the TextMate grammar has tokenised the file: several token classes on screen
  await page.waitForFunction(() => {
    const spans = document.querySelectorAll('.editor-instance .view-lines span[class^="mtk"]');
    return new Set([...spans].map((s) => s.className)).size >= 5;
  }, null, { timeout: 30000 });
  const mode = await page.locator('.statusbar-item[id="status.editor.mode"]').textContent();
  if (!mode?.includes('Kina')) throw new Error(`language mode is "${mode}", not Kina`);
  // the extension's status item turns to a check mark once kina-lsp answered initialize
  await statusItem('check').waitFor({ timeout: 60000 });
}

/** Sets kina.server.pythonPath in the Settings editor, as a user would. */
async function setPythonPath(value) {
  await runCommand('Preferences: Open User Settings');
  const search = page.locator('.settings-editor .suggest-input-container .monaco-editor textarea').first();
  await search.waitFor({ timeout: 30000 });
  await search.focus(); // the editor's cursor layer would swallow a click
  await page.keyboard.type('@id:kina.server.pythonPath');
  // machine-overridable settings of a remote window (code-server is one) live in the Remote tab
  await page.locator('.settings-editor .settings-tabs-widget .action-label', { hasText: 'Remote' }).first().click();
  const input = page.locator('.settings-editor .setting-item-contents', { hasText: 'Python Path' }).locator('input').first();
  await input.waitFor({ timeout: 30000 });
  await input.fill(value);
  await input.press('Tab'); // commit the edit
}

/** Hovers the `x` of `let x = gather(..)` until the server's type shows. */
async function hoverLetX() {
  const { line } = position('let x = gather');
  // Monaco renders spaces as U+00A0 and an inlay hint may sit between `let x` and `=`,
  // so find the token in the DOM; `x` is its own token (variable.other.declaration.kina).
  // Found again on every attempt: the code lenses ("Build & validate") and inlay hints
  // that arrive with the first analysis move the line (a box taken before them pointed
  // two rows above `x`, and every retry hovered the wrong line).
  const locate = () => page.evaluate(() => {
    for (const row of document.querySelectorAll('.editor-instance .view-line')) {
      if (!/^\s*let x\b.*gather/.test(row.textContent.replace(/\u00a0/g, ' '))) continue;
      const token = [...row.querySelectorAll('span > span')].find((s) => s.textContent === 'x');
      const r = token?.getBoundingClientRect();
      return r ? { x: r.x + r.width / 2, y: r.y + r.height / 2 } : null;
    }
    return null;
  });
  const hover = page.locator('.monaco-hover:not(.hidden)', { hasText: EXPECTED_HOVER }).first();
  for (let attempt = 1; ; attempt++) {
    const box = await locate();
    if (!box) throw new Error(`the \`x\` of line ${line} is not on screen`);
    await page.mouse.move(box.x, box.y);
    try {
      await hover.waitFor({ state: 'visible', timeout: 5000 });
      break;
    } catch (e) {
      // the first hover can race the server's first analysis; move away and come back
      if (attempt >= 4) throw new Error(`no hover with ${EXPECTED_HOVER} over x on line ${line}`);
      await page.mouse.move(5, 5);
    }
  }
  log(`hover: ${await oneLine(hover, 160)}`);
}

async function trusted() {
  await step('01-server-started', openExample);

  await step('02-hover-let-type', hoverLetX);

  await step('03-broken-shape-in-problems', async () => {
    await page.mouse.move(5, 5);
    await page.keyboard.press('Escape');
    // lm_head.reshape([1, 4, 8]) -> [1, 4, 7]: 28 elements cannot hold the 32 of lm_head
    const at = position('lm_head.reshape([1, 4, 8])');
    await focusEditor();
    await withQuickInput('Control+G', `:${at.line}:${at.column + 'lm_head.reshape([1, 4, '.length}`);
    await page.keyboard.press('Shift+ArrowRight');
    await page.keyboard.type('7');
    await page.locator('.editor-instance .view-line', { hasText: 'reshape([1, 4, 7])' }).waitFor();
    await page.locator('.editor-instance .squiggly-error').first().waitFor({ timeout: 30000 });
    await page.keyboard.press('Control+Shift+M'); // Problems view
    const problem = page.locator('.markers-panel .monaco-list-row', { hasText: /reshape|volume/i }).first();
    await problem.waitFor({ timeout: 30000 });
    log(`problem: ${await oneLine(problem)}`);
  });

  await step('04-build-and-validate', async () => {
    // undo the breaking edit; the squiggle goes away again
    await focusEditor();
    await page.keyboard.press('Control+Z');
    await page.locator('.editor-instance .view-line', { hasText: 'reshape([1, 4, 8])' }).first().waitFor();
    await page.locator('.editor-instance .squiggly-error').first().waitFor({ state: 'detached', timeout: 30000 });
    await runCommand('Kina: Build & Validate');
    const passed = toast('build & validate passed');
    const failed = toast(/build failed|validation failed|failed:/);
    await Promise.race([passed.waitFor({ timeout: 180000 }), failed.waitFor({ timeout: 180000 })]);
    if (await failed.isVisible()) throw new Error(`Build & Validate failed: ${await oneLine(failed)}`);
    log(`notification: ${await oneLine(passed.locator('.notification-list-item-message'))}`);
  });

  await lensAndFoldingChecks({ page, step, log, toast, focusEditor });
  await refactorChecks({ page, step, log, focusEditor, withQuickInput, position });

  await crossFileChecks({ page, step, log, focusEditor, withQuickInput,
    folder: new URL(opt.url).searchParams.get('folder') });

  await step('05-show-mlir', async () => {
    await focusEditor();
    await runCommand('Kina: Show MLIR');
    await page.locator('.editor-instance .view-line', { hasText: 'func.func' }).first().waitFor({ timeout: 60000 });
    log('MLIR opened beside the source');
  });

  await step('06-missing-interpreter-error', async () => {
    // what a user with a wrong interpreter sees: set kina.server.pythonPath in the Settings
    // editor; the extension restarts the server on the change and reports the failure
    await setPythonPath('/nonexistent/venv/bin/python');
    const error = toast('did not start');
    await error.waitFor({ timeout: 60000 });
    const text = await oneLine(error, 400);
    if (!/set `?kina\.server\.pythonPath/.test(text) || !/Open Settings/.test(text)) {
      throw new Error(`start-failure message does not say what to set: ${text}`);
    }
    await statusItem('error').waitFor({ timeout: 10000 });
    // one message with the fix, not a second generic one from the client library
    const generic = await page.locator('.notification-toast', { hasText: "couldn't create connection" }).count();
    if (generic > 0) throw new Error('the generic "couldn\'t create connection" toast is shown as well');
    log(`error: ${text}`);
  });
}

async function restricted() {
  await step('r1-restricted-mode-server-started', async () => {
    await openExample();
    // the workbench says it is in Restricted Mode (banner or status bar)
    await page.locator('text=Restricted Mode').first().waitFor({ timeout: 30000 });
  });

  await step('r2-hover-in-restricted-mode', hoverLetX);
  await noLensesInRestrictedMode({ page, step, log });

  await step('r3-no-build-and-validate', async () => {
    await page.mouse.move(5, 5);
    await page.keyboard.press('Escape');
    await focusEditor();
    await page.keyboard.press('F1');
    const input = page.locator('.quick-input-widget .quick-input-box input');
    await input.waitFor({ state: 'visible', timeout: 10000 });
    await input.fill('>Kina: ');
    const rows = page.locator('.quick-input-list .monaco-list-row');
    await rows.filter({ hasText: 'Show MLIR' }).first().waitFor({ timeout: 10000 });
    const offered = await rows.filter({ hasText: 'Build & Validate' }).count();
    await page.keyboard.press('Escape');
    if (offered > 0) throw new Error('Build & Validate is offered in Restricted Mode');
  });

  await step('r4-workspace-folder-interpreter-passed-over', async () => {
    // a user-level interpreter inside the untrusted folder: not used, with a warning; the
    // server starts from PATH instead
    await setPythonPath('${workspaceFolder}/.venv/bin/python');
    // the warning itself (the start failure that may follow quotes the same sentence)
    const warning = toast(/Kina: `kina\.server\.pythonPath` \(.*points into this untrusted workspace/);
    await warning.waitFor({ timeout: 60000 });
    log(`warning: ${await oneLine(warning.locator('.notification-list-item-message'), 300)}`);
    // the server then starts from `kina-lsp` on PATH, or, where there is none, the start
    // failure says why the setting was not used
    await Promise.race([statusItem('check').waitFor({ timeout: 60000 }), statusItem('error').waitFor({ timeout: 60000 })]);
    if (await statusItem('error').isVisible()) {
      const failure = toast('did not start');
      await failure.waitFor({ timeout: 10000 });
      const text = await oneLine(failure.locator('.notification-list-item-message'), 600);
      if (!/points into this untrusted workspace/.test(text)) throw new Error(`start failure does not say why: ${text}`);
      log(`no kina-lsp on PATH here: ${text}`);
    } else {
      log('the server started from PATH');
    }
  });
}

try {
  if (opt.mode === 'restricted') {
    await restricted();
  } else {
    await trusted();
  }
} catch (e) {
  console.error(`[drive] step ${stepName} failed: ${e.stack ?? e}`);
  await page.screenshot({ path: path.join(opt.out, `${stepName}-failed.png`) }).catch(() => {});
  process.exitCode = 1;
} finally {
  await ctx.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
