/**
 * Packaging test: the .vsix made by `npm run package` holds exactly what VS Code loads
 * (bundled client, grammar, language configuration, manifest) and none of the sources,
 * tests or node_modules; its manifest declares the language, commands and settings.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const vsix = process.env.KINA_VSIX ?? path.join(root, 'dist', 'kina.vsix');

function entries() {
  assert.ok(fs.existsSync(vsix), `${vsix} is missing: run \`npm run package\` first`);
  const listing = execFileSync('unzip', ['-Z1', vsix], { encoding: 'utf8' });
  return listing.split('\n').filter(Boolean);
}

function readEntry(name) {
  return execFileSync('unzip', ['-p', vsix, name], { encoding: 'utf8', maxBuffer: 16 << 20 });
}

test('the vsix contains the bundled client, grammar, language configuration and manifest', () => {
  const names = entries();
  for (const required of [
    'extension/dist/extension.js',
    'extension/syntaxes/kina.tmLanguage.json',
    'extension/language-configuration.json',
    'extension/package.json',
    'extension.vsixmanifest',
  ]) {
    assert.ok(names.includes(required), `${required} not in ${vsix}:\n${names.join('\n')}`);
  }
});

test('the vsix ships no sources, tests, node_modules or nested packages', () => {
  const stray = entries().filter((n) => /^extension\/(src|test|out|e2e|node_modules)\/|\.ts$|\.vsix$|\.map$/.test(n));
  assert.deepEqual(stray, []);
});

test('the bundled client inlines vscode-languageclient and needs only `vscode` at run time', () => {
  const js = readEntry('extension/dist/extension.js');
  assert.match(js, /kina\.buildAndValidate/);
  const requires = new Set([...js.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]));
  const external = [...requires].filter((m) => m !== 'vscode' && !m.startsWith('node:') && !isNodeBuiltin(m));
  assert.deepEqual(external, [], 'modules the .vsix would need from node_modules');
});

test('the packaged manifest declares the language, commands, settings and trust limits', () => {
  const pkg = JSON.parse(readEntry('extension/package.json'));
  assert.equal(pkg.main, './dist/extension.js');
  assert.deepEqual(pkg.contributes.languages[0].extensions, ['.kina']);
  const commands = pkg.contributes.commands.map((c) => c.command);
  for (const c of ['kina.buildAndValidate', 'kina.showMlir', 'kina.restartServer']) assert.ok(commands.includes(c), c);
  const settings = Object.keys(pkg.contributes.configuration.properties);
  for (const s of ['kina.server.pythonPath', 'kina.server.command', 'kina.diagnostics.debounceMs', 'kina.inlayHints.enabled', 'kina.trace.server']) {
    assert.ok(settings.includes(s), s);
  }
  assert.equal(pkg.capabilities.untrustedWorkspaces.supported, 'limited');
  const build = pkg.contributes.commands.find((c) => c.command === 'kina.buildAndValidate');
  assert.match(build.enablement, /isWorkspaceTrusted/);
});

function isNodeBuiltin(name) {
  return ['fs', 'path', 'os', 'child_process', 'net', 'util', 'events', 'stream', 'crypto', 'url', 'assert', 'buffer', 'string_decoder', 'tty', 'readline'].includes(name);
}
