// Copies the built module (dist/*.js and their .d.ts) to gateway/sdk/, which the gateway serves
// at /sdk/ and the Python package ships (so `pip install` needs no Node). `npm run build` runs
// it after tsc; tests/clients/test_js.py checks that gateway/sdk/ is what a build makes.
//
//   node scripts/publish-sdk.mjs [DIST] [TARGET]
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = resolve(process.argv[2] ?? join(here, "..", "dist"));
const target = resolve(process.argv[3] ?? join(here, "..", "..", "..", "gateway", "sdk"));
mkdirSync(target, { recursive: true });
for (const name of readdirSync(target)) {
  if (name.endsWith(".js") || name.endsWith(".d.ts")) rmSync(join(target, name));
}
const built = readdirSync(dist).filter((name) => name.endsWith(".js") || name.endsWith(".d.ts"));
for (const name of built.sort()) copyFileSync(join(dist, name), join(target, name));
console.log(`${built.length} files -> ${target}`);
