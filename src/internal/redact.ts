/**
 * Remove credentials from text that may quote a connection string, so a
 * database URL never reaches a log line or an error message.
 */

/**
 * The user-info of a URL: everything from `scheme://` up to the last `@` before whitespace.
 * Greedy on purpose: a password may hold an unencoded `@` or `/` (`postgres://u:p@ss/w@host`),
 * and hiding a host along with it (when a later `@` follows in the same word) is the safe mistake.
 */
const urlWithCredentials = /\b([a-z][a-z0-9+.-]*:\/\/)\S*@/gi

/**
 * A `password` setting: a keyword/value connection string (`password=s3cret`, `password = 'a b'`,
 * libpq's single quotes with `\'` and `\\` escapes; an unterminated quote runs to the end), a URL
 * parameter (`?password=x&...`), a variable (`PGPASSWORD=x`) or a JSON field (`"password":"x"`).
 */
const passwordSetting = /(password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|$)|"(?:[^"\\]|\\.)*(?:"|$)|[^\s&]*)/gi
const passwordField = /("password"\s*:\s*)"(?:[^"\\]|\\.)*"/gi

/** Replace the user-info part of any URL and any password setting with `***`. */
export const redactSecrets = (text: string): string =>
  text
    .replace(urlWithCredentials, "$1***@")
    .replace(passwordSetting, "$1***")
    .replace(passwordField, "$1\"***\"")
