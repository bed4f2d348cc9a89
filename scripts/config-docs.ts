// Regenerates the settings reference in docs/configuration.md from src/config/schema.ts.
import fs from 'node:fs';
import { withGeneratedSection } from '../src/config/docs.js';

const file = new URL('../docs/configuration.md', import.meta.url);
fs.writeFileSync(file, withGeneratedSection(fs.readFileSync(file, 'utf8')));
console.log('docs/configuration.md: settings reference regenerated');
