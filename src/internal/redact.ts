/**
 * Remove credentials from text that may quote a connection string, so a
 * database URL never reaches a log line or an error message.
 */
const urlWithCredentials = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/@]*@/gi
const passwordParam = /(password=)[^\s&]*/gi

/** Replace the user-info part of any URL and any `password=` parameter with `***`. */
export const redactSecrets = (text: string): string =>
  text.replace(urlWithCredentials, "$1***@").replace(passwordParam, "$1***")
