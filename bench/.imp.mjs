const t=[];let p=performance.now();
for (const m of process.argv.slice(2)) { await import(m); const n=performance.now(); t.push(`${m.replace(/.*dist\//,'')} ${(n-p).toFixed(0)}`); p=n; }
console.log(t.join("; "))
