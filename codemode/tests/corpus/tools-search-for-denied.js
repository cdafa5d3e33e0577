// expect: completed
// value: false
const found = await catalog.search('admin delete denied policy');
return found.map((t) => t.name).includes('admin_delete');
