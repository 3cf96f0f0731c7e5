// Validates rendered Kubernetes objects against the Kubernetes schemas, without a server.
//   node chart_validate.mjs DOCS.json WORKDIR
// DOCS.json is chart_checks.py's list of {source, object}. WORKDIR holds a node_modules link
// to the tools folder (scripts/k8s-tools/install.sh) and a package.json of type module.
//
// Two checks, because neither catches everything alone:
// 1. kubernetes-models' ajv validators (the OpenAPI schemas of each kind): wrong types,
//    missing required fields, bad formats. Those schemas allow unknown fields.
// 2. tsc on a generated file that assigns each object, as an object literal, to the kind's
//    TypeScript interface from the same package: TypeScript refuses a property a literal's
//    type does not declare (excess property check), at any depth. That is the unknown-field
//    check (`kubectl --validate=strict` does the same on a server).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [docsPath, workdir] = process.argv.slice(2);
const docs = JSON.parse(readFileSync(docsPath, "utf8"));

// apiVersion + kind -> the module of kubernetes-models (or a CRD package) that has both the
// validator class and the interface I<Kind>.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

const failures = [];
const describe = (i) => {
  const o = docs[i].object;
  return `${docs[i].source} (${o.kind}/${o.metadata?.name})`;
};

// 1. ajv.
for (let i = 0; i < docs.length; i++) {
  const o = docs[i].object;
  let Model;
  try {
    Model = (await import(modulePath(o.apiVersion, o.kind)))[o.kind];
  } catch {
    Model = undefined;
  }
  if (typeof Model !== "function") {
    failures.push(`${describe(i)}: no schema for ${o.apiVersion} ${o.kind}`);
    continue;
  }
  try {
    new Model(o).validate();
  } catch (e) {
    failures.push(`${describe(i)}: schema: ${e.message}`);
  }
}

// 2. tsc. One constant per object; the line ranges map tsc's errors back to objects.
let ts = "";
const starts = [];
let line = 1;
const emit = (text) => {
  ts += text;
  line += text.split("\n").length - 1;
};
docs.forEach((d, i) => {
  const o = d.object;
  emit(`import type { I${o.kind} as T${i} } from "${modulePath(o.apiVersion, o.kind)}";\n`);
});
docs.forEach((d, i) => {
  starts.push(line);
  emit(`export const doc${i}: T${i} = ${JSON.stringify(d.object, null, 1)};\n`);
});
writeFileSync(join(workdir, "rendered.ts"), ts);
writeFileSync(
  join(workdir, "tsconfig.json"),
  JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: "es2022",
      module: "nodenext",
      moduleResolution: "nodenext",
      skipLibCheck: true,
      types: [],
    },
    files: ["rendered.ts"],
  }),
);
try {
  execFileSync(join(workdir, "node_modules/.bin/tsc"), ["-p", "."], { cwd: workdir, encoding: "utf8", stdio: "pipe" });
} catch (e) {
  const out = `${e.stdout ?? ""}${e.stderr ?? ""}`;
  for (const msg of out.split(/\n(?=\S)/).filter((m) => m.trim())) {
    const m = /^rendered\.ts\((\d+),\d+\): (.*)$/s.exec(msg.trim());
    if (!m) {
      failures.push(`tsc: ${msg.trim()}`);
      continue;
    }
    const at = Number(m[1]);
    let i = starts.length - 1;
    while (i > 0 && starts[i] > at) i--;
    const where = at < starts[0] ? "imports" : describe(i);
    failures.push(`${where}: types: ${m[2].replace(/\s+/g, " ")}`);
  }
  if (!out.trim()) failures.push(`tsc failed: ${e.message}`);
}

for (const f of failures) console.log(`chart_validate: ${f}`);
console.log(`chart_validate: ${docs.length} objects, ${failures.length} problems`);
process.exit(failures.length ? 1 : 0);
