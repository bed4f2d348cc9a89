import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { renderSettingsReference } from '../../src/config/docs.js';
import { SETTINGS } from '../../src/config/schema.js';
import { REPO_ROOT } from '../helpers/server.js';

test('docs/configuration.md carries the settings reference generated from the schema (npm run docs)', () => {
  const doc = fs.readFileSync(path.join(REPO_ROOT, 'docs/configuration.md'), 'utf8');
  assert.ok(doc.includes(renderSettingsReference()), 'the generated section is out of date: run npm run docs');
  for (const setting of SETTINGS) assert.ok(doc.includes(`\`${setting.name}\``), `${setting.name} is documented`);
});
