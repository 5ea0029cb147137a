/**
 * E2E steps for the language server across files (issue 29; called from drive.mjs), in the
 * workspace's two-file module: main.kina (`import layers`, a call `layers.linear[4, 3, 8]`)
 * and layers.kina (tests/fixtures/imports):
 *
 * - 04d-definition-in-other-file: Go to Definition (F12) on `linear` in main.kina opens
 *   layers.kina at `fn linear`;
 * - 04e-rename-across-files: Rename Symbol (F2) of `linear` to `affine` in main.kina
 *   edits both files (`layers.affine` in main.kina, `fn affine` in layers.kina);
 * - 04f-importer-diagnostic: an edit in layers.kina (`fn affine` -> `fn affine2`) makes the
 *   server re-check main.kina: its `unknown-name` error reaches the Problems view, and goes
 *   again when the edit is undone;
 * - 04g-std-read-only: F12 on `nn.linear` (main.kina also imports the standard library's nn)
 *   opens compiler/std/nn.kina read-only: typing there does not change the document.
 */
import fs from 'node:fs';
import path from 'node:path';

export const MAIN = `import layers
import nn

fn first_layer(x: Tensor[F32, [4, 3]], w1: Tensor[F32, [3, 8]]) -> Tensor[F32, [4, 8]] {
  layers.linear[4, 3, 8](x, w1)
}

fn dense(x: Tensor[F32, [4, 3]], w: Tensor[F32, [3, 8]], b: Tensor[F32, [8]]) -> Tensor[F32, [4, 8]] {
  nn.linear[4, 3, 8](x, w, b)
}
`;

export async function crossFileChecks({ page, step, log, focusEditor, withQuickInput, folder }) {
  const at = (file, needle, offset = 0) => {
    const lines = fs.readFileSync(path.join(folder, file), 'utf8').split('\n');
    const line = lines.findIndex((l) => l.includes(needle));
    if (line < 0) throw new Error(`"${needle}" not in ${file}`);
    return `:${line + 1}:${lines[line].indexOf(needle) + 1 + offset}`;
  };
  const line = (text) => page.locator('.editor-instance .view-line', { hasText: text }).first();
  // (the explorer, not Quick Open: after F12 its first row can be another recently opened file)
  const open = async (file) => {
    await page.locator(`.explorer-folders-view .monaco-list-row[aria-label*="${file}"]`).first().click();
    await page.locator(`.tab.active[aria-label*="${file}"]`).waitFor({ timeout: 30000 });
    await focusEditor();
  };

  await step('04d-definition-in-other-file', async () => {
    await open('main.kina');
    await withQuickInput('Control+G', at('main.kina', 'layers.linear', 'layers.li'.length));
    await page.keyboard.press('F12');
    await page.locator('.tab.active[aria-label*="layers.kina"]').waitFor({ timeout: 30000 });
    await line('fn linear[').waitFor({ timeout: 10000 });
    log('F12 on layers.linear opened layers.kina');
  });

  await step('04e-rename-across-files', async () => {
    await open('main.kina');
    await withQuickInput('Control+G', at('main.kina', 'layers.linear', 'layers.li'.length));
    await page.keyboard.press('F2');
    const input = page.locator('.rename-box input, .rename-input');
    await input.first().waitFor({ timeout: 30000 });
    await input.first().fill('affine');
    await page.keyboard.press('Enter');
    await line('layers.affine[4, 3, 8]').waitFor({ timeout: 30000 });
    await open('layers.kina');
    await line('fn affine[').waitFor({ timeout: 30000 });
    await line(/=\saffine\(x,/).waitFor({ timeout: 10000 });   // (inlay hints sit inside the line's text; spaces are U+00A0)
    log('renamed in main.kina and layers.kina');
  });

  await step('04f-importer-diagnostic', async () => {
    await open('layers.kina');
    await page.keyboard.press('Control+Home');
    // (VS Code saves the files a rename edited unless files.refactoring.autoSave is off)
    const saved = fs.readFileSync(path.join(folder, 'layers.kina'), 'utf8').includes('fn affine[');
    // (the cursor right after `fn affine`: `fn linear` has the same length)
    await withQuickInput('Control+G', at('layers.kina', saved ? 'fn affine[' : 'fn linear[', 'fn affine'.length));
    await page.keyboard.type('2');
    await line('fn affine2[').waitFor({ timeout: 10000 });
    await page.keyboard.press('Control+Shift+M'); // Problems view
    const problem = page.locator('.markers-panel .monaco-list-row', { hasText: /module .layers. has no function/ }).first();
    await problem.waitFor({ timeout: 60000 });
    log(`importer's problem: ${(await problem.textContent()).replace(/\s+/g, ' ').slice(0, 200)}`);
    await focusEditor();
    await page.keyboard.press('Control+Z');
    await line('fn affine[').waitFor({ timeout: 10000 });
    await problem.waitFor({ state: 'detached', timeout: 60000 });
    log('gone after undo');
  });

  await step('04g-std-read-only', async () => {
    await open('main.kina');
    await withQuickInput('Control+G', at('main.kina', 'nn.linear', 'nn.li'.length));
    await page.keyboard.press('F12');
    await page.locator('.tab.active[aria-label*="nn.kina"]').waitFor({ timeout: 30000 });
    await line('fn linear[').waitFor({ timeout: 10000 });
    await page.waitForTimeout(1500);   // (the extension marks the editor read-only when it becomes active)
    await focusEditor();
    await page.keyboard.type('zzz');
    await page.keyboard.press('Enter');
    await page.waitForTimeout(1500);
    const typed = await page.locator('.editor-instance .view-line', { hasText: 'zzz' }).count();
    const dirty = await page.locator('.tab.active.dirty').count();
    if (typed > 0 || dirty > 0) {
      throw new Error(`std's nn.kina took the typing (lines with it: ${typed}, dirty tab: ${dirty})`);
    }
    log('F12 on nn.linear opened std nn.kina read-only: typing changed nothing');
  });
}
