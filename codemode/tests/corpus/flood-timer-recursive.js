// expect: waiting
function tick() { setTimeout(tick, 0); }
tick();
return 'started';
