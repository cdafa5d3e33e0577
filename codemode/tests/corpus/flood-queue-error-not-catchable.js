// expect: failed:invalid_input
// The admission error is sticky: catching it does not let the program go on.
for (let i = 0; i < 1000; i++) { try { echo({ i }); } catch (e) {} }
return await echo({ after: true });
