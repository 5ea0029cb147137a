/**
 * E2E steps for the editor features of issue 12 (called from drive.mjs):
 *
 * - 04b-code-lenses: a "Build & validate" lens stands right above each visible function,
 *   and clicking the one above `fn attn` validates just that function through the
 *   kina.validateFunction command (the lens maps to a registered command);
 * - 04c-fold-function: the fold control in the gutter of `fn attn` collapses the function
 *   (its body lines leave the screen, the `}` line stays) and expands it again;
 * - 04c2-extract-to-let (issue 31): select `wo.reshape([1, 4, 4])`, open the Refactor menu
 *   (Command Palette "Refactor..."), pick "Extract ... into `let wo_reshape`" (VS Code resolves
 *   the action's edit with codeAction/resolve), read the new let and its use back from the
 *   editor, and undo it.
 */

/** Bounding box of the first view line whose text matches `re` (spaces are U+00A0 in the DOM). */
async function lineBox(page, re) {
  return page.evaluate((source) => {
    const pattern = new RegExp(source);
    for (const row of document.querySelectorAll('.editor-instance .view-lines .view-line')) {
      if (pattern.test(row.textContent.replace(/\u00a0/g, ' '))) {
        const r = row.getBoundingClientRect();
        return { top: r.top, bottom: r.bottom, height: r.height };
      }
    }
    return null;
  }, re.source);
}

async function visibleLines(page) {
  return page.evaluate(() => [...document.querySelectorAll('.editor-instance .view-lines .view-line')]
    .map((row) => row.textContent.replace(/\u00a0/g, ' ')));
}

/** Index of the lens that ends right above the line matching `re`, and the number of lenses. */
async function lensAbove(page, lens, re) {
  const fnLine = await lineBox(page, re);
  if (!fnLine) throw new Error(`no line matching ${re} on screen`);
  const boxes = await lens.evaluateAll((els) => els.map((e) => {
    const r = e.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom };
  }));
  const index = boxes.findIndex((b) => b.bottom <= fnLine.top + 2 && fnLine.top - b.bottom < fnLine.height);
  if (index < 0) throw new Error(`no lens right above ${re} (lenses at ${JSON.stringify(boxes)}, line at ${fnLine.top})`);
  return { index, count: boxes.length };
}

export async function lensAndFoldingChecks({ page, step, log, toast, focusEditor }) {
  await step('04b-code-lenses', async () => {
    await focusEditor();
    await page.keyboard.press('Control+Home');
    const lens = page.locator('.editor-instance .codelens-decoration a', { hasText: 'Build & validate' });
    await lens.first().waitFor({ timeout: 60000 });
    // lenses are re-fetched after edits; a click on a lens that is being replaced finds its
    // command disposed ("Actual command not found"), so click once they have settled, and
    // again if that happened anyway (as a user would)
    await page.waitForTimeout(2000);
    const passed = toast('build & validate passed (1/1');
    const stale = toast('Actual command not found');
    const failed = toast(/build failed|validation failed|failed:|open a \.kina/);
    for (let attempt = 1; ; attempt++) {
      const above = await lensAbove(page, lens, /^fn attn\(/);
      if (attempt === 1) log(`${above.count} Build & validate lens(es) on screen; one right above fn attn`);
      await lens.nth(above.index).click();
      try {
        await Promise.race([passed.waitFor({ timeout: 90000 }), failed.waitFor({ timeout: 90000 }),
          stale.waitFor({ timeout: 90000 })]);
      } catch (e) {
        const shown = await page.locator('.notifications-toasts .notification-toast').allTextContents();
        throw new Error(`no result after clicking the lens; notifications: ${JSON.stringify(shown)}`);
      }
      if (await failed.isVisible()) throw new Error(`the lens' Build & validate failed: ${await failed.textContent()}`);
      if (await passed.isVisible()) break;
      if (attempt >= 3) throw new Error('the lens command was disposed on every click');
      log('the lens was being refreshed; clicking again');
      await stale.locator('.codicon-notifications-clear, .codicon-close').first().click().catch(() => {});
      await page.waitForTimeout(1500);
    }
    log(`lens ran: ${(await passed.textContent()).replace(/\s+/g, ' ').slice(0, 160)}`);
  });

  await step('04c-fold-function', async () => {
    await focusEditor();
    await page.keyboard.press('Control+Home');
    const before = await visibleLines(page);
    if (!before.some((l) => l.includes('let scores'))) throw new Error('attn body not on screen');
    const fnLine = await lineBox(page, /^fn attn\(/);
    // folding controls show when the mouse is over the gutter
    await page.mouse.move(40, fnLine.top + fnLine.height / 2);
    const control = await page.evaluate((top) => {
      for (const el of document.querySelectorAll('.editor-instance .margin-view-overlays .cldr.codicon-folding-expanded')) {
        const r = el.getBoundingClientRect();
        if (Math.abs(r.top - top) < 3) return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
      }
      return null;
    }, fnLine.top);
    if (!control) throw new Error('no fold control in the gutter of `fn attn(`');
    await page.mouse.click(control.x, control.y);
    await page.waitForFunction(() => ![...document.querySelectorAll('.editor-instance .view-lines .view-line')]
      .some((row) => row.textContent.includes('let scores')), null, { timeout: 10000 });
    const folded = await visibleLines(page);
    if (!folded.some((l) => /^fn attn\(/.test(l))) throw new Error('the folded function lost its first line');
    if (!folded.some((l) => l.trim() === '}')) throw new Error('the closing brace is not visible after folding');
    log(`folded: ${before.length - folded.length} fewer lines on screen`);
    await page.mouse.move(40, fnLine.top + fnLine.height / 2);
    await page.locator('.editor-instance .margin-view-overlays .cldr.codicon-folding-collapsed').first().click();
    await page.locator('.editor-instance .view-line', { hasText: 'let scores' }).first().waitFor({ timeout: 10000 });
  });
}

/** In Restricted Mode no lens is offered: every lens runs a build. */
export async function noLensesInRestrictedMode({ page, step, log }) {
  await step('r2b-no-code-lenses', async () => {
    // the server runs here (r2 got a hover from it); lenses would have arrived by now
    await page.waitForTimeout(3000);
    const lenses = await page.locator('.editor-instance .codelens-decoration a').count();
    if (lenses > 0) throw new Error(`${lenses} code lens(es) shown in Restricted Mode`);
    log('no code lenses in Restricted Mode');
  });
}

/** Extract an expression into a let through the Refactor menu (see the header). */
export async function refactorChecks({ page, step, log, focusEditor, withQuickInput, position }) {
  await step('04c2-extract-to-let', async () => {
    const needle = 'wo.reshape([1, 4, 4])';
    const at = position(needle);
    await focusEditor();
    await withQuickInput('Control+G', `:${at.line}:${at.column}`);
    for (let i = 0; i < needle.length; i++) await page.keyboard.press('Shift+ArrowRight');
    const title = 'Extract `wo.reshape([1, 4, 4])` into `let wo_reshape`';
    const item = page.locator('.action-widget .monaco-list-row', { hasText: title }).first();
    // the menu lists what the server offers for the selection (the refactors are re-checked
    // first); retry while the first analysis of the edited file is still coming
    for (let attempt = 1; ; attempt++) {
      await withQuickInput('F1', '>Refactor...', 'Refactor...');
      try {
        await item.waitFor({ timeout: 10000 });
        break;
      } catch (e) {
        const shown = await page.locator('.action-widget .monaco-list-row').allTextContents();
        await page.keyboard.press('Escape');
        if (attempt >= 3) throw new Error(`no "${title}" in the Refactor menu; it shows ${JSON.stringify(shown)}`);
      }
    }
    log(`refactor menu: ${(await page.locator('.action-widget .monaco-list-row').allTextContents()).join(' | ')}`);
    // the menu takes the keyboard (a pointer block covers the page while it is open): move
    // the focus to the item, then Enter, as a user picking it from the keyboard would
    for (let i = 0; i < 10 && !(await item.getAttribute('class')).includes('focused'); i++) {
      await page.keyboard.press('ArrowDown');
    }
    await page.keyboard.press('Enter');
    // (the let's inlay type hint, `: F32[1, 4, 4]`, may be drawn inside the line by now; the
    // view line's spaces are U+00A0, which \s matches)
    const letLine = page.locator('.editor-instance .view-line', { hasText: /let\s+wo_reshape\b.*=\s+wo\.reshape\(\[1,\s+4,\s+4\]\)\s+in/ });
    await letLine.first().waitFor({ timeout: 15000 });
    await page.locator('.editor-instance .view-line', { hasText: 'merged @ wo_reshape in' }).first().waitFor({ timeout: 5000 });
    log(`extracted: ${(await letLine.first().textContent()).replace(/\u00a0/g, ' ').trim()}`);
    await focusEditor();
    await page.keyboard.press('Control+Z');
    await letLine.first().waitFor({ state: 'detached', timeout: 10000 });
  });
}
